"""Image recipes as pure functions: versions → build arguments, labels, tags, clear refusals.

The big recipes (pytorch, tensorflow) are never built in CI; what they would be
given is checked here, including that every build argument is one their Dockerfile declares.
"""

from __future__ import annotations

import json
import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuslice.cli.main import app
from gpuslice.common.images import DEFAULT_SESSION_IMAGE, ImageMeta
from gpuslice.imagebuild import ImageBuildError
from gpuslice.imagebuild.build import _with_base_apps, recipe_digest
from gpuslice.imagebuild.recipe_defs import ML_IMAGES, RECIPES, RecipeOptions, plan

GIB = 1024**3
TORCH_INDEX = "https://wheels.example.internal/cpu"


def declared_args(recipe: str) -> set[str]:
    text = resources.files("gpuslice.imagebuild").joinpath("recipes", recipe, "Dockerfile")
    return set(re.findall(r"^ARG (\w+)", text.read_text(), re.M))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_version_plans_with_declared_args_and_readable_labels(name: str) -> None:
    recipe = RECIPES[name]
    for item in recipe.versions:
        options = RecipeOptions(torch_index_url=TORCH_INDEX,
                                base_image="py37:local" if item.needs_base_image else None)
        build = plan(name, item.version, options)
        assert build.tag == f"gpuslice/{name}:{item.version}"
        assert set(build.build_args) <= declared_args(name), "an argument the Dockerfile ignores"
        meta = ImageMeta.from_labels(build.labels)
        assert meta.problems == ()
        assert meta.frameworks == item.frameworks and meta.gpu == item.gpu
        assert build.labels["gpuslice.image"] == name
        assert set(build.context) >= {"Dockerfile", "extra-ca.sh", "extra-ca.crt"}


def test_scipy_versions_pin_a_known_good_set() -> None:
    build = plan("scipy", "1.3.2", RecipeOptions())
    assert build.build_args == {
        "BASE_IMAGE": DEFAULT_SESSION_IMAGE, "SKLEARN_VERSION": "1.3.2",
        "NUMPY_VERSION": "1.26.4", "SCIPY_VERSION": "1.11.4", "PANDAS_VERSION": "2.1.4",
    }
    assert plan("scipy", "1.5.2", RecipeOptions()).build_args["NUMPY_VERSION"].startswith("2.")
    meta = ImageMeta.from_labels(plan("scipy", None, RecipeOptions()).labels)
    assert meta.title == "scikit-learn 1.5.2 (CPU)"  # the default version
    assert (meta.min_cpu, meta.min_mem, meta.gpu, meta.min_gpu) == (500, GIB, False, 0)


def test_an_unknown_version_lists_the_known_ones() -> None:
    with pytest.raises(ImageBuildError, match=r"scipy has no version '0.9'; known: 1.3.2, 1.5.2"):
        plan("scipy", "0.9", RecipeOptions())
    with pytest.raises(ImageBuildError, match="no recipe named 'jax'; known: mlflow, notebook"):
        plan("jax", None, RecipeOptions())


def test_tensorflow_1_15_says_why_not_and_what_is_possible() -> None:
    for version in ("1.15", "1.15.5"):
        with pytest.raises(ImageBuildError) as err:
            plan("tensorflow", version, RecipeOptions())
        text = str(err.value)
        assert "only for Python 3.5-3.7" in text and "Python 3.11" in text
        assert "2.x" in text and "--base-image" in text
    legacy = plan("tensorflow", "1.15.5", RecipeOptions(base_image="registry.local/python:3.7"))
    assert legacy.build_args["BASE_IMAGE"] == "registry.local/python:3.7"
    assert legacy.build_args["TF_PACKAGE"] == "tensorflow"
    assert plan("tensorflow", None, RecipeOptions()).build_args == {
        "BASE_IMAGE": "gpuslice/notebook:4.2.5", "TF_VERSION": "2.17.1",
        "TF_PACKAGE": "tensorflow[and-cuda]", "NUMPY_VERSION": "1.26.4",
        "TENSORBOARD_VERSION": "2.17.1",
    }


def test_pytorch_variants() -> None:
    cuda = plan("pytorch", "2.5.1-cuda", RecipeOptions())
    assert "TORCH_INDEX_URL" not in cuda.build_args  # the image's own pip index
    meta = ImageMeta.from_labels(cuda.labels)
    assert (meta.gpu, meta.min_gpu) == (True, 500)
    with pytest.raises(ImageBuildError, match="pass --torch-index"):
        plan("pytorch", "2.5.1-cpu", RecipeOptions())
    cpu = plan("pytorch", "2.5.1-cpu", RecipeOptions(torch_index_url=TORCH_INDEX))
    assert cpu.build_args["TORCH_INDEX_URL"] == TORCH_INDEX
    assert cpu.build_args["TORCH_VERSION"] == "2.5.1"
    assert ImageMeta.from_labels(cpu.labels).gpu is False


def test_recipe_apps_start_with_their_base_path_and_token() -> None:
    [jupyter] = ImageMeta.from_labels(plan("notebook", None, RecipeOptions()).labels).apps
    argv = jupyter.argv(port=8888, base_path="/s/abc/jupyter", token="t0ken")
    assert "--ServerApp.base_url=/s/abc/jupyter" in argv and "--ServerApp.port=8888" in argv
    assert "--IdentityProvider.token=t0ken" in argv  # Jupyter's token is never empty
    assert jupyter.base_path and (jupyter.name, jupyter.port) == ("jupyter", 8888)

    mlflow = plan("mlflow", None, RecipeOptions())
    assert mlflow.base_image == "gpuslice/notebook:4.2.5"  # scikit-learn, matplotlib, Jupyter
    assert set(mlflow.context) >= {"train_diabetes.py"}
    apps = {a.name: a for a in ImageMeta.from_labels(mlflow.labels).apps}
    assert set(apps) == {"mlflow", "tensorboard"}
    for base_path, option in (("/", ""), ("/s/abc/mlflow", "--static-prefix /s/abc/mlflow ")):
        # at its origin's root ("/") MLflow takes no --static-prefix (it refuses "/")
        [script] = apps["mlflow"].argv(port=5000, base_path=base_path, token="t")[2:]
        assert '--allowed-hosts "localhost:5000"' in script
        shown = subprocess.run(["sh", "-c", script.replace("exec mlflow", "exec echo")],
                               capture_output=True, text=True, env={"HOME": "/h"}).stdout
        assert f"--workers 1 {option}--allowed-hosts localhost:5000" in shown, shown
    [script] = apps["tensorboard"].argv(port=6006, base_path="/s/abc/tensorboard", token="t")[2:]
    assert "--path_prefix /s/abc/tensorboard" in script and "--port 6006" in script
    for framework in ("pytorch", "tensorflow"):
        labels = plan(framework, None, RecipeOptions(torch_index_url=TORCH_INDEX)).labels
        assert [a.name for a in ImageMeta.from_labels(labels).apps] == ["tensorboard"]
    assert plan("mlflow", None, RecipeOptions(base_image="my/base:1")).base_image == "my/base:1"


def test_an_image_built_from_another_keeps_its_apps() -> None:
    notebook = plan("notebook", None, RecipeOptions()).labels
    torch = plan("pytorch", "2.5.1-cuda", RecipeOptions(base_image="gpuslice/notebook:4.2.5"))
    merged = _with_base_apps(torch, notebook)
    assert [a.name for a in ImageMeta.from_labels(merged.labels).apps] == [
        "jupyter", "tensorboard"]
    assert ImageMeta.from_labels(merged.labels).gpu is True  # the rest is the recipe's own
    assert _with_base_apps(torch, {}) == torch


def test_notebook_image_holds_the_scientific_stack_from_the_scipy_image() -> None:
    notebook = plan("notebook", None, RecipeOptions())
    assert notebook.base_image == "gpuslice/scipy:1.5.2"  # CI builds it anyway: no slower
    assert "train_digits.py" in notebook.context
    frameworks = ImageMeta.from_labels(notebook.labels).frameworks
    assert {k: frameworks[k] for k in ("numpy", "pandas", "matplotlib", "scikit-learn")} == {
        "numpy": "2.1.3", "pandas": "2.2.3", "matplotlib": "3.9.2", "scikit-learn": "1.5.2"}


def test_framework_images_build_from_the_notebook_image_and_say_their_version() -> None:
    assert [r for r, _ in ML_IMAGES] == ["pytorch", "pytorch", "tensorflow", "tensorflow"]
    assert len({v for _, v in ML_IMAGES}) == 4  # two versions of each
    titles = []
    for recipe, version in ML_IMAGES:
        build = plan(recipe, version, RecipeOptions())
        assert build.base_image == "gpuslice/notebook:4.2.5"  # JupyterLab, NumPy, ...
        assert "train_digits.py" in build.context
        meta = ImageMeta.from_labels(build.labels)
        framework = version.split("-")[0]
        assert meta.frameworks["torch" if recipe == "pytorch" else "tensorflow"] == framework
        assert {"jupyterlab", "tensorboard", "numpy", "pandas", "matplotlib",
                "scikit-learn"} <= set(meta.frameworks)
        titles.append(meta.title)
    assert titles == ["PyTorch 2.5.1 (CUDA)", "PyTorch 2.4.1 (CUDA)",
                      "TensorFlow 2.17.1 (CUDA)", "TensorFlow 2.15.1 (CUDA)"]
    cpu = plan("pytorch", "2.4.1-cpu", RecipeOptions(torch_index_url=TORCH_INDEX))
    assert ImageMeta.from_labels(cpu.labels).title == "PyTorch 2.4.1 (CPU)"


def test_extra_ca_goes_into_the_context_and_the_digest(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    without = plan("scipy", None, RecipeOptions())
    with_ca = plan("scipy", None, RecipeOptions(extra_ca_bundle=ca))
    assert with_ca.context["extra-ca.crt"] == ca.read_bytes()
    assert without.context["extra-ca.crt"] == b""
    again = plan("scipy", None, RecipeOptions())
    assert recipe_digest(without, "sha256:a") == recipe_digest(again, "sha256:a")
    assert recipe_digest(without, "sha256:a") != recipe_digest(with_ca, "sha256:a")
    assert recipe_digest(without, "sha256:a") != recipe_digest(without, "sha256:b")  # new base
    with pytest.raises(ImageBuildError, match="extra CA bundle .* does not exist"):
        plan("scipy", None, RecipeOptions(extra_ca_bundle=tmp_path / "none.pem"))


def test_cli_lists_recipes_and_refuses_impossible_builds_in_one_line() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["image", "recipes", "--json"])
    assert listed.exit_code == 0, listed.output
    recipes = {r["name"]: r for r in json.loads(listed.stdout)}
    assert recipes["scipy"]["default"] == "1.5.2" and recipes["scipy"]["ci"] is True
    assert "1.15" in recipes["tensorflow"]["unavailable"]
    refused = runner.invoke(app, ["image", "build", "tensorflow", "--version", "1.15"])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: tensorflow 1.15: TensorFlow 1.15 wheels exist only")
    assert refused.stderr.count("\n") == 1
    unknown = runner.invoke(app, ["image", "build", "scipy", "--version", "9"])
    assert unknown.exit_code == 2 and "known: 1.3.2, 1.5.2" in unknown.stderr
