"""The standard session image: ``gpuslice/rootfs:<suite>`` (debootstrap) → ``gpuslice/base``.

Both steps are idempotent: an image is skipped when it exists with the same recipe digest
(a label), so a second run costs two image inspections. The debootstrap tarball is cached on
disk, so even a forced rebuild of the images does not download packages again.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import aiodocker

from gpuslice import __version__
from gpuslice.hook import HOOK_DIR, HOOK_FILES, PTH_FILE
from gpuslice.imagebuild.rootfs import (
    ImageBuildError,
    Progress,
    RootfsRecipe,
    find_debian_mirror,
    import_rootfs,
    rootfs_tarball,
)
from gpuslice.imagebuild.source import (
    DEFAULT_PULL_TIMEOUT,
    DEFAULT_REGISTRY_IMAGE,
    SOURCES,
    choose_source,
    docker_calls,
    source_from_env,
)

BASE_REPO = "gpuslice/base"
ROOTFS_REPO = "gpuslice/rootfs"
DIGEST_LABEL = "gpuslice.recipe-digest"
DEFAULT_CACHE_DIR = Path("/var/cache/gpuslice/images")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: recipes/base/: the Dockerfile, the sudo shim and the user-site fix (see the Dockerfile).
BASE_RECIPE_FILES = ("Dockerfile", "sudo", "gpuslice_usersite.py", "gpuslice-usersite.pth")


def default_extra_ca_bundle() -> Path | None:
    """The CA bundle images trust besides Debian's own: ``GPUSLICE_EXTRA_CA_BUNDLE`` (empty:
    none), else ``SSL_CERT_FILE``, else this host's system bundle, so that an image trusts what
    its host trusts (a TLS-inspecting proxy's CA included) without anyone having to say so.
    Every builder uses this one default, so that images built by different commands agree."""
    explicit = os.environ.get("GPUSLICE_EXTRA_CA_BUNDLE")
    if explicit is not None:
        return Path(explicit) if explicit else None
    for candidate in (os.environ.get("SSL_CERT_FILE", ""), HOST_CA_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@dataclass(frozen=True, slots=True)
class PipIndex:
    """Package index settings baked into ``/etc/pip.conf`` (empty: pip's defaults)."""

    index_url: str = ""
    extra_index_url: str = ""
    trusted_host: str = ""

    def build_args(self) -> dict[str, str]:
        return {
            "PIP_INDEX_URL": self.index_url,
            "PIP_EXTRA_INDEX_URL": self.extra_index_url,
            "PIP_TRUSTED_HOST": self.trusted_host,
        }


@dataclass(frozen=True, slots=True)
class BaseImageOptions:
    """How to build the base image. Every field has a working default on a Debian host."""

    cache_dir: Path = DEFAULT_CACHE_DIR
    extra_ca_bundle: Path | None = None
    mirror: str | None = None  # default: the mirror this machine's apt uses
    pip_index: PipIndex | None = None  # default: the host's pip configuration
    tag: str = f"{BASE_REPO}:{__version__}"
    rootfs: RootfsRecipe = field(default_factory=RootfsRecipe)
    force: bool = False
    # Registry-first: "auto" | "registry" | "debootstrap" (gpuslice.imagebuild.source).
    source: str = "auto"
    registry_image: str = DEFAULT_REGISTRY_IMAGE
    pull_timeout: float = DEFAULT_PULL_TIMEOUT

    @classmethod
    def from_env(cls, **values: Any) -> BaseImageOptions:
        """Options with the source settings of ``GPUSLICE_IMAGE_SOURCE`` and
        ``GPUSLICE_REGISTRY_BASE_IMAGE`` (read when called, never at import)."""
        source, image = source_from_env()
        return cls(**{"source": source, "registry_image": image, **values})


@dataclass(frozen=True, slots=True)
class BuildResult:
    tag: str
    built: bool  # False: it existed with the same recipe
    seconds: float


async def ensure_base_image(
    docker: aiodocker.Docker, options: BaseImageOptions, progress: Progress = print
) -> BuildResult:
    """Build ``gpuslice/base`` (and its rootfs) unless an image with this recipe exists."""
    started = time.monotonic()
    rootfs_tag = await ensure_rootfs_image(docker, options, progress)
    pip_index = options.pip_index if options.pip_index is not None else host_pip_index()
    context = _base_context(options.extra_ca_bundle)
    digest = _digest(context, rootfs_tag, pip_index, await _image_id(docker, rootfs_tag))
    if not options.force and await _has_digest(docker, options.tag, digest):
        progress(f"base: {options.tag} is up to date")
        return BuildResult(options.tag, False, time.monotonic() - started)
    progress(f"base: building {options.tag} from {rootfs_tag}")
    await build_context_image(
        docker, context, options.tag,
        build_args={"BASE_IMAGE": rootfs_tag, **pip_index.build_args()},
        labels={DIGEST_LABEL: digest, "gpuslice.image": "base"},
        progress=progress, prefix="base",
    )
    progress(f"base: built {options.tag}")
    return BuildResult(options.tag, True, time.monotonic() - started)


async def ensure_rootfs_image(
    docker: aiodocker.Docker, options: BaseImageOptions, progress: Progress = print
) -> str:
    """``gpuslice/rootfs:<suite>`` unless present: from a registry Debian image when one can
    be had (see :mod:`gpuslice.imagebuild.source`), else debootstrap's, imported."""
    recipe = options.rootfs
    tag = f"{ROOTFS_REPO}:{recipe.suite}"
    ca = _read_ca(options.extra_ca_bundle)
    registry_digest = _registry_rootfs_digest(options, ca)
    accepted = {
        "auto": {recipe.digest, registry_digest},
        "registry": {registry_digest},
        "debootstrap": {recipe.digest},
    }.get(options.source)
    if accepted is None:
        raise ImageBuildError(f"image source {options.source!r} is not one of "
                              f"{', '.join(SOURCES)} (GPUSLICE_IMAGE_SOURCE)")
    if not options.force and await _label(docker, tag, DIGEST_LABEL) in accepted:
        progress(f"rootfs: {tag} is up to date")
        return tag
    present, pull = docker_calls(docker)
    choice = await choose_source(
        options.source, options.registry_image, present=present, pull=pull,
        timeout=options.pull_timeout, progress=progress,
    )
    if choice.kind == "registry":
        progress(f"rootfs: building {tag} from {options.registry_image}")
        await build_context_image(
            docker, _rootfs_context(ca), tag,
            build_args={"BASE_IMAGE": options.registry_image,
                        "PACKAGES": " ".join(recipe.packages),
                        "DEBIAN_MIRROR": options.mirror or ""},
            labels={DIGEST_LABEL: registry_digest, "gpuslice.image": "rootfs"},
            progress=progress, prefix="rootfs",
        )
        progress(f"rootfs: built {tag}")
        return tag
    mirror = options.mirror or find_debian_mirror(recipe.suite)
    tarball = await asyncio.to_thread(rootfs_tarball, recipe, options.cache_dir, mirror, progress)
    await import_rootfs(
        docker, tarball, ROOTFS_REPO, recipe.suite, progress, label=(DIGEST_LABEL, recipe.digest)
    )
    return tag


async def build_context_image(
    docker: aiodocker.Docker,
    context: dict[str, bytes],
    tag: str,
    *,
    build_args: dict[str, str],
    labels: dict[str, str],
    progress: Progress,
    prefix: str,
) -> None:
    """Build ``tag`` from an in-memory context through the Engine API, relaying its output."""
    stream = docker.images.build(
        fileobj=io.BytesIO(_pack(context)),
        encoding="gzip",
        tag=tag,
        buildargs=build_args,
        labels=labels,
        rm=True,
        forcerm=True,
        stream=True,
    )
    try:
        async for message in stream:
            if "error" in message:
                raise ImageBuildError(f"building {tag} failed: {message['error'].strip()}")
            for raw in str(message.get("stream", "")).splitlines():
                if text := _shorten(raw).strip():
                    progress(f"{prefix}: {text}")
    except aiodocker.DockerError as exc:
        raise ImageBuildError(f"building {tag} failed: {exc}") from exc


def host_pip_index(python: str = sys.executable) -> PipIndex:
    """The index settings of this host's pip (config files and ``PIP_*`` env), network ones only.

    Local ``file://`` indexes and wheel directories exist only on the host, so they are dropped.
    """
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return PipIndex()
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, _, raw = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        values[name] = raw.strip().strip("'\"")  # later scopes (env) override earlier ones

    def network(name: str) -> str:
        urls = values.get(name, "").split()
        return " ".join(u for u in urls if u.startswith(("http://", "https://")))

    return PipIndex(
        index_url=network("index-url"),
        extra_index_url=network("extra-index-url"),
        trusted_host=values.get("trusted-host", ""),
    )


def _shorten(text: str, width: int = 160) -> str:
    text = _ANSI.sub("", text)  # pip colours its warnings even without a terminal
    return text if len(text) <= width else text[: width - 1] + "…"


def _read_ca(extra_ca_bundle: Path | None) -> bytes:
    if extra_ca_bundle is not None and not extra_ca_bundle.is_file():
        raise ImageBuildError(f"extra CA bundle {extra_ca_bundle} does not exist")
    return extra_ca_bundle.read_bytes() if extra_ca_bundle else b""


def _rootfs_context(ca: bytes) -> dict[str, bytes]:
    recipe = resources.files("gpuslice.imagebuild").joinpath("recipes/rootfs/Dockerfile")
    return {"Dockerfile": recipe.read_bytes(), "extra-ca.crt": ca}


def _registry_rootfs_digest(options: BaseImageOptions, ca: bytes) -> str:
    """Identifies a registry-built rootfs: its recipe, source image, mirror and CA bundle."""
    h = hashlib.sha256()
    h.update(_rootfs_context(ca)["Dockerfile"])
    h.update(json.dumps([options.rootfs.digest, options.registry_image, options.mirror or "",
                         hashlib.sha256(ca).hexdigest()]).encode())
    return "registry-" + h.hexdigest()[:16]


def _base_context(extra_ca_bundle: Path | None) -> dict[str, bytes]:
    recipe = resources.files("gpuslice.imagebuild").joinpath("recipes/base")
    files = {name: recipe.joinpath(name).read_bytes() for name in BASE_RECIPE_FILES}
    for name in (*HOOK_FILES, PTH_FILE):
        files[f"hook/{name}"] = (HOOK_DIR / name).read_bytes()
    files["extra-ca.crt"] = _read_ca(extra_ca_bundle)
    return files


def _digest(context: dict[str, bytes], rootfs_tag: str, pip: PipIndex, rootfs_id: str) -> str:
    h = hashlib.sha256()
    for name in sorted(context):
        h.update(name.encode() + b"\0" + hashlib.sha256(context[name]).digest())
    h.update(json.dumps([rootfs_tag, rootfs_id, pip.build_args()], sort_keys=True).encode())
    return h.hexdigest()[:16]


def _pack(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def _image_id(docker: aiodocker.Docker, tag: str) -> str:
    return str((await docker.images.inspect(tag))["Id"])


async def _has_digest(docker: aiodocker.Docker, tag: str, digest: str) -> bool:
    return await _label(docker, tag, DIGEST_LABEL) == digest


async def _label(docker: aiodocker.Docker, tag: str, key: str) -> str | None:
    """The image's label ``key``; None when the image or the label is missing."""
    try:
        info = await docker.images.inspect(tag)
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return None
        raise
    labels = (info.get("Config") or {}).get("Labels") or {}
    return labels.get(key)
