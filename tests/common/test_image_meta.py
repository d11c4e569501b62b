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
