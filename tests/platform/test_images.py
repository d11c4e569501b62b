"""Multi-version images: a session from each built scipy version reports that version.

The images are built by `scripts/build-images.sh` (CI) or `gpuslice image build scipy
--version V`; the test does not build them (a minute of pip downloads) and skips, saying how
to build them, when they are absent.
"""

from __future__ import annotations

import asyncio
import time

import aiodocker
import pytest

from tests.waits import scaled

from .conftest import Platform

pytestmark = pytest.mark.docker

VERSIONS = ("1.3.2", "1.5.2")  # the two built by scripts/build-images.sh
REQUEST = ["--cpu", "0.5", "--mem", "1g"]  # the recipe's minimum resources


def _missing(tags: list[str]) -> list[str]:
    async def check() -> list[str]:
        async with aiodocker.Docker() as docker:
            missing = []
            for tag in tags:
                try:
                    await docker.images.inspect(tag)
                except aiodocker.DockerError:
                    missing.append(tag)
            return missing

    return asyncio.run(check())


@pytest.fixture
def scipy_images(docker_ready: None) -> list[str]:
    tags = [f"gpuslice/scipy:{v}" for v in VERSIONS]
    missing = _missing(tags)
    if missing:
        pytest.skip(f"{', '.join(missing)} not built; run scripts/build-images.sh (CI does) or "
                    "`gpuslice image build scipy --version V`")
    return tags


def _create(platform: Platform, image: str, name: str, timeout: float = 30.0) -> None:
    """Create a session; a just-built image is known once the node's next heartbeat lists it."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        done = platform.cli("session", "create", "--image", image, "--name", name, *REQUEST,
                            "--wait")
        if done.returncode == 0:
            return
        if "unknown image" not in done.stderr or time.monotonic() > deadline:
            raise AssertionError(f"session create --image {image}: {done.stderr}{done.stdout}")
        time.sleep(1)


def test_each_scipy_version_reports_its_own_version(
    scipy_images: list[str], platform: Platform
) -> None:
    for version, image in zip(VERSIONS, scipy_images, strict=True):
        name = f"sk-{version.replace('.', '-')}"
        _create(platform, image, name)
        platform.wait_status(name, {"RUNNING"}, timeout=60)
        out = platform.ok("session", "exec", name, "--", "python3", "-c",
                          "import sklearn; print(sklearn.__version__)")
        assert out.strip() == version, f"{image} reports {out!r}"
