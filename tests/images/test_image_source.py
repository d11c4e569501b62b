"""Registry-first root filesystem: the choice between a registry image and debootstrap."""

from __future__ import annotations

import asyncio

import aiodocker
import pytest

from gpuslice.imagebuild import BaseImageOptions, ImageBuildError
from gpuslice.imagebuild.base import ensure_rootfs_image
from gpuslice.imagebuild.source import DEFAULT_REGISTRY_IMAGE, choose_source, source_from_env


class FakeDocker:
    def __init__(self, *, local: bool = False, pull_error: str | None = None,
                 pull_delay: float = 0.0) -> None:
        self.local, self.pull_error, self.pull_delay = local, pull_error, pull_delay
        self.pulled: list[str] = []

    async def present(self, image: str) -> bool:
        return self.local

    async def pull(self, image: str) -> None:
        self.pulled.append(image)
        await asyncio.sleep(self.pull_delay)
        if self.pull_error:
            raise aiodocker.DockerError(500, {"message": self.pull_error})


async def choose(mode: str, fake: FakeDocker, timeout: float = 5.0) -> tuple[str, list[str]]:
    lines: list[str] = []
    choice = await choose_source(mode, "debian:bookworm-slim", present=fake.present,
                                 pull=fake.pull, timeout=timeout, progress=lines.append)
    return choice.kind, lines


async def test_debootstrap_mode_never_asks_a_registry() -> None:
    fake = FakeDocker(local=True)
    assert (await choose("debootstrap", fake))[0] == "debootstrap"
    assert fake.pulled == []


async def test_a_local_registry_image_is_used_without_pulling() -> None:
    fake = FakeDocker(local=True)
    kind, lines = await choose("auto", fake)
    assert kind == "registry" and fake.pulled == []
    assert "present locally" in lines[0]


async def test_auto_pulls_and_uses_the_registry_image() -> None:
    fake = FakeDocker()
    assert (await choose("auto", fake))[0] == "registry"
    assert fake.pulled == ["debian:bookworm-slim"]


async def test_auto_falls_back_to_debootstrap_and_says_why() -> None:
    kind, lines = await choose("auto", FakeDocker(pull_error="lookup registry: no such host"))
    assert kind == "debootstrap"
    assert "cannot pull debian:bookworm-slim (lookup registry: no such host)" in lines[-1]
    assert "debootstrap instead" in lines[-1]


async def test_a_registry_that_does_not_answer_costs_only_the_timeout() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    kind, lines = await choose("auto", FakeDocker(pull_delay=30), timeout=0.2)
    assert kind == "debootstrap" and loop.time() - started < 2
    assert "no answer in time" in lines[-1]


async def test_registry_mode_fails_instead_of_falling_back() -> None:
    with pytest.raises(ImageBuildError, match="cannot pull debian:bookworm-slim: denied"):
        await choose("registry", FakeDocker(pull_error="denied"))


async def test_an_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ImageBuildError, match="'mirror' is not one of auto, registry"):
        await choose("mirror", FakeDocker())
    with pytest.raises(ImageBuildError, match="GPUSLICE_IMAGE_SOURCE"):
        await ensure_rootfs_image(None, BaseImageOptions(source="mirror"))  # type: ignore[arg-type]


def test_source_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSLICE_IMAGE_SOURCE", raising=False)
    monkeypatch.delenv("GPUSLICE_REGISTRY_BASE_IMAGE", raising=False)
    assert source_from_env() == ("auto", DEFAULT_REGISTRY_IMAGE)
    monkeypatch.setenv("GPUSLICE_IMAGE_SOURCE", "Debootstrap")
    monkeypatch.setenv("GPUSLICE_REGISTRY_BASE_IMAGE", "mirror.local/debian:12-slim")
    options = BaseImageOptions.from_env(force=True)
    assert (options.source, options.registry_image, options.force) == (
        "debootstrap", "mirror.local/debian:12-slim", True)
