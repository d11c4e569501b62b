"""Where the root filesystem comes from: a registry Debian image when one can be had, else
debootstrap.

``GPUSLICE_IMAGE_SOURCE``: ``auto`` (default) uses the registry image when it is present
locally (pulled before, or ``docker load``-ed on an air-gapped machine) or can be pulled within
a short timeout, and otherwise falls back to debootstrap, saying so; ``registry`` insists on
the registry image; ``debootstrap`` never asks a registry. A failed pull on a machine without
a registry costs well under a second (the Engine's name lookup fails at once); the timeout
bounds the case of a registry that does not answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiodocker

from gpuslice.imagebuild.rootfs import ImageBuildError, Progress

SOURCES = ("auto", "registry", "debootstrap")
DEFAULT_REGISTRY_IMAGE = "debian:bookworm-slim"
DEFAULT_PULL_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class SourceChoice:
    kind: str  # "registry" or "debootstrap"
    image: str | None = None  # the registry image, for kind "registry"


def source_from_env() -> tuple[str, str]:
    """``(GPUSLICE_IMAGE_SOURCE, GPUSLICE_REGISTRY_BASE_IMAGE)`` with their defaults."""
    mode = os.environ.get("GPUSLICE_IMAGE_SOURCE", "").strip().lower() or "auto"
    image = os.environ.get("GPUSLICE_REGISTRY_BASE_IMAGE", "").strip() or DEFAULT_REGISTRY_IMAGE
    return mode, image


async def choose_source(
    mode: str,
    image: str,
    *,
    present: Callable[[str], Awaitable[bool]],
    pull: Callable[[str], Awaitable[None]],
    timeout: float,
    progress: Progress,
) -> SourceChoice:
    """Decide between the registry image and debootstrap (the Docker calls are parameters,
    so the choice is tested without a registry)."""
    if mode not in SOURCES:
        raise ImageBuildError(f"image source {mode!r} is not one of {', '.join(SOURCES)} "
                              "(GPUSLICE_IMAGE_SOURCE)")
    if mode == "debootstrap":
        return SourceChoice("debootstrap")
    if await present(image):
        progress(f"rootfs: using the registry image {image} (present locally)")
        return SourceChoice("registry", image)
    progress(f"rootfs: pulling {image} (at most {timeout:.0f}s)")
    try:
        await asyncio.wait_for(pull(image), timeout)
    except (aiodocker.DockerError, OSError, TimeoutError) as exc:
        why = "no answer in time" if isinstance(exc, TimeoutError) else _one_line(exc)
        if mode == "registry":
            raise ImageBuildError(f"cannot pull {image}: {why}") from None
        progress(f"rootfs: cannot pull {image} ({why}); building the root filesystem "
                 "with debootstrap instead")
        return SourceChoice("debootstrap")
    progress(f"rootfs: pulled {image}")
    return SourceChoice("registry", image)


def docker_calls(
    docker: aiodocker.Docker,
) -> tuple[Callable[[str], Awaitable[bool]], Callable[[str], Awaitable[None]]]:
    """The real ``present`` and ``pull`` for :func:`choose_source`."""

    async def present(image: str) -> bool:
        try:
            await docker.images.inspect(image)
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def pull(image: str) -> None:
        await docker.images.pull(image)

    return present, pull


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(text, dict):  # some aiodocker versions keep the Engine's JSON body
        text = text.get("message", text)
    return " ".join(str(text).split())[:200]
