"""The framework images of `make images-ml` (not in CI: GBs each): a session of each on one
fGPU of a mock GPU reports its own framework version and trains the image's example on
scikit-learn's digits, offline, within its slice (the session's CPU and memory limits; the
hook caps the framework's GPU memory where there is a real device).

Skipped, image by image and saying how to build it, where `make images-ml` has not run.
"""

from __future__ import annotations

import os

import pytest

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.common.images import ImageMeta
from gpuslice.common.resources import GiB
from gpuslice.imagebuild.recipe_defs import ML_IMAGES
from tests.dockerd import docker_ready
from tests.images.sessions import image_labels, missing_images, node_runtime, session_spec

__all__ = ["docker_ready", "node_runtime"]
pytestmark = pytest.mark.docker

MODULE = {"pytorch": "torch", "tensorflow": "tensorflow"}


async def _built(recipe: str, version: str) -> str:
    """The tag `make images-ml` built: PyTorch as -cuda, or -cpu with GPUSLICE_TORCH_INDEX."""
    tags = [f"gpuslice/{recipe}:{version}"]
    if version.endswith("-cuda"):
        tags.append(f"gpuslice/{recipe}:{version.removesuffix('-cuda')}-cpu")
    if not os.environ.get("GPUSLICE_TEST_ML_IMAGES"):
        # each trains on a CPU of a 2-core machine for half a minute: `make test-ml` runs them
        pytest.skip("framework images: `make test-ml` tests them (GPUSLICE_TEST_ML_IMAGES=1)")
    missing = await missing_images(tags)
    present = [t for t in tags if t not in missing]
    if not present:
        pytest.skip(f"{' or '.join(tags)} not built; run `make images-ml` (not in CI)")
    return present[0]


@pytest.mark.parametrize(("recipe", "version"), ML_IMAGES, ids=[f"{r}-{v}" for r, v in ML_IMAGES])
async def test_each_framework_image_prints_its_version_and_trains_on_its_slice(
    node_runtime: DockerRuntime, recipe: str, version: str,
) -> None:
    tag = await _built(recipe, version)
    framework = version.split("-")[0]
    meta = ImageMeta.from_labels(await image_labels(tag))
    assert meta.frameworks[MODULE[recipe]] == framework  # what the launch dialog shows
    assert {a.name for a in meta.apps} == {"jupyter", "tensorboard"}
    # one CPU: the docker lane runs another test file beside this one on a 2-core machine
    spec = session_spec(node_runtime, tag, cpu=1000, mem=4 * GiB)
    await node_runtime.ensure_running(spec)
    module = MODULE[recipe]
    done = await node_runtime.exec(spec.session_id, ["bash", "-c", (
        f"python -c 'import {module}; print({module}.__version__)' 2>/dev/null && "
        "python -c 'import numpy, pandas, matplotlib, sklearn, jupyterlab, tensorboard' && "
        "python /opt/gpuslice/examples/train_digits.py 2>/dev/null")], timeout=600)
    assert done.exit_code == 0, done.stdout + done.stderr
    printed, name, slice_line, accuracy = done.stdout.splitlines()[-4:]
    assert printed.split("+")[0] == framework  # 2.5.1+cu124 is torch 2.5.1
    assert name.split()[0] == module and name.split()[1] == printed
    # The session's slice as the node made it: 1 fGPU of 2 per GPU, 1 CPU.
    assert slice_line.startswith("slice: 1.0 fGPU, 1.0 CPU, device ")
    assert float(accuracy.removeprefix("test accuracy ")) > 0.9
