import json

from gpuslice.common.images import (
    LABEL_APPS,
    LABEL_FRAMEWORKS,
    LABEL_GPU,
    LABEL_MIN_GPU,
    LABEL_MIN_MEM,
    ImageApp,
    ImageMeta,
)


def test_labels_round_trip():
    meta = ImageMeta(
        title="scikit-learn 1.5", frameworks={"python": "3.11", "scikit-learn": "1.5.2"},
        min_gpu=500, min_cpu=1500, min_mem=2 * 1024**3, gpu=True,
        apps=(ImageApp("jupyter", "http", 8888),), owner="alice", origin_session="s-1",
    )
    assert ImageMeta.from_labels(meta.to_labels()) == meta


def test_an_image_without_labels_is_a_plain_image():
    assert ImageMeta.from_labels(None) == ImageMeta()
    assert ImageMeta.from_labels({"maintainer": "x"}) == ImageMeta()


def test_malformed_labels_are_ignored_and_named():
    meta = ImageMeta.from_labels({
        LABEL_MIN_GPU: "lots", LABEL_MIN_MEM: "2g", LABEL_FRAMEWORKS: "[1]",
        LABEL_APPS: '[{"name": "jupyter", "protocol": "http", "port": 8888}, '
                    '{"name": "x", "protocol": "smtp", "port": 25}]',
        LABEL_GPU: "TRUE",
    })
    assert meta.min_gpu == 0 and meta.min_mem == 2 * 1024**3 and meta.gpu
    assert meta.frameworks == {}
    assert meta.apps == (ImageApp("jupyter", "http", 8888),)
    assert len(meta.problems) == 3


def test_apps_say_how_they_start():
    app = ImageApp("board", "http", 6006, command=("board", "--port={port}", "--root={base_path}",
                                                   "--key={token}", "{{literal}}"),
                   base_path=True, start_timeout=90)
    meta = ImageMeta(apps=(app,))
    assert ImageMeta.from_labels(meta.to_labels()) == meta
    assert app.argv(port=1, base_path="/s/x/board", token="k") == [
        "board", "--port=1", "--root=/s/x/board", "--key=k", "{literal}"]


def test_unusable_app_declarations_are_named_and_dropped():
    def problems(**app: object) -> tuple[str, ...]:
        item = {"name": "x", "protocol": "http", "port": 80} | app
        meta = ImageMeta.from_labels({LABEL_APPS: json.dumps([item])})
        assert meta.apps == ()
        return meta.problems

    assert "the platform's own terminal" in problems(name="terminal")[0]
    assert "placeholders are base_path, port, token" in problems(command=["x", "{home}"])[0]
    assert "a literal brace is written twice" in problems(command=["x", "{"])[0]
    assert "never names {base_path}" in problems(command=["x"], base_path=True)[0]
    assert "start_timeout" in problems(command=["x"], start_timeout=0)[0]
    assert "list of at most 64 strings" in problems(command="x --port 1")[0]
    twice = ImageMeta.from_labels({LABEL_APPS: json.dumps(
        [{"name": "x", "protocol": "http", "port": 1}] * 2)})
    assert len(twice.apps) == 1 and "declared twice" in twice.problems[0]


def test_image_kinds_say_what_the_launch_dialog_offers() -> None:
    """Issue 34, finding 4: the dialog hides internal and test images and puts the standard
    one first; each kind comes from the labels, or the name for images from before them."""
    from gpuslice.common.images import HIDDEN_KINDS, LABEL_KIND, ImageMeta, image_kind

    plain = ImageMeta()
    scipy = ImageMeta.from_labels({"gpuslice.image.title": "scikit-learn 1.5.2 (CPU)"})
    assert image_kind("gpuslice/base:0.1.0", plain) == "standard"
    assert image_kind("gpuslice/rootfs:bookworm", plain) == "internal"
    assert image_kind("gpuslice-ml/rootfs:bookworm", plain) == "internal"
    assert image_kind("gpuslice-test/apps:3d77", plain) == "test"
    assert image_kind("lab/anything:1", ImageMeta.from_labels({LABEL_KIND: "Test"})) == "test"
    assert image_kind("gpuslice/scipy:1.5.2", scipy) == "framework"
    assert image_kind("u/alice/env:1", plain) == "private"
    assert image_kind("python:3.11", plain) == "other"
    assert HIDDEN_KINDS == {"internal", "test"}
    assert ImageMeta.from_labels(ImageMeta(kind="internal").to_labels()).kind == "internal"


def test_an_app_command_takes_bare_placeholders_only():
    """Security review F14: a width or precision was applied on every listing of the apps
    (``{port:>999999999}``: a gigabyte per argument); a bare ``{}`` failed there too."""
    def problems(*command: str) -> tuple[str, ...]:
        item = {"name": "x", "protocol": "http", "port": 80, "command": ["x", *command]}
        meta = ImageMeta.from_labels({LABEL_APPS: json.dumps([item])})
        assert meta.apps == ()
        return meta.problems

    for shaped in ("--port={port:>999999999}", "{token:.99999999}", "{port!r}",
                   "{base_path:{token}}"):
        [problem] = problems(shaped)
        assert "has a format spec or conversion" in problem, shaped
        assert "placeholders are written bare, e.g. {port}" in problem
    assert "command names {}; placeholders are" in problems("{}")[0]
    assert "command names {0}" in problems("{0}")[0]
