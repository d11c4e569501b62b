"""A Debian root filesystem made with ``debootstrap``, cached as a tarball, imported into Docker.

The mirror is the one this machine's apt uses (read from ``/etc/apt/sources.list[.d]`` at run
time), so nothing here names a package host. Importing goes through the Engine API's
``POST /images/create?fromSrc=-`` (the API behind ``docker import``), never the docker CLI.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiodocker

Progress = Callable[[str], None]

#: Packages on top of debootstrap's minbase: Python with pip and venv, CA roots, the download
#: tools users' guides take for granted (wget, curl) and sudo (usable only where the node's
#: admin allows it: agent setting ``allow_sudo``; else the base image's shim says it is off),
#: and an SSH server with SFTP and rsync (the agent runs ``sshd -i`` per connection for
#: ``gpuslice session ssh``, scp, sftp, rsync and VS Code Remote-SSH; nothing starts it on its
#: own). No compilers.
ROOTFS_PACKAGES = (
    "python3", "python3-pip", "python3-venv", "ca-certificates", "wget", "curl", "sudo",
    "openssh-server", "openssh-sftp-server", "rsync",
)
_CHUNK = 1024 * 1024
_PER_PACKAGE = (
    "I: Retrieving",
    "I: Validating",
    "I: Unpacking",
    "I: Configuring",
    "I: Extracting",
)


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step failed and why."""


@dataclass(frozen=True, slots=True)
class RootfsRecipe:
    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ROOTFS_PACKAGES

    @property
    def digest(self) -> str:
        """Identifies the tarball's content: same recipe, same cached file and image."""
        key = json.dumps([self.suite, self.variant, sorted(self.packages), _arch()])
        return hashlib.sha256(key.encode()).hexdigest()[:16]


def find_debian_mirror(suite: str = "bookworm", apt_dir: Path = Path("/etc/apt")) -> str:
    """The first apt source serving ``suite`` itself (not -updates or -security)."""
    for uris, suites in _apt_sources(apt_dir):
        if suite in suites:
            for uri in uris:
                if uri.startswith(("http://", "https://", "file:/")):
                    return uri.rstrip("/")
    raise ImageBuildError(
        f"no apt source for Debian {suite} in {apt_dir}/sources.list(.d); "
        "pass a mirror explicitly (--mirror or GPUSLICE_DEBIAN_MIRROR)"
    )


def rootfs_tarball(recipe: RootfsRecipe, cache_dir: Path, mirror: str, progress: Progress) -> Path:
    """Return the cached tarball for ``recipe``, running debootstrap first if there is none."""
    target = cache_dir / f"rootfs-{recipe.suite}-{recipe.digest}.tar.gz"
    if target.is_file():
        progress(f"rootfs: using cached {target}")
        return target
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root; run the image build as root")
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (Debian package 'debootstrap')")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache_dir) as tmp:
        root = Path(tmp) / "root"
        progress(f"rootfs: debootstrap {recipe.variant} {recipe.suite} from {mirror}")
        _run(
            [
                "debootstrap",
                f"--variant={recipe.variant}",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(root),
                mirror,
            ],
            progress,
            "debootstrap",
        )
        _slim(root)
        progress("rootfs: packing the tarball")
        partial = Path(tmp) / "rootfs.tar.gz"
        _run(
            ["tar", "-C", str(root), "--numeric-owner", "-I", "gzip -1", "-cf", str(partial), "."],
            progress,
            "tar",
        )
        partial.replace(target)  # atomic: a crash never leaves a half tarball in the cache
    progress(f"rootfs: cached {target} ({target.stat().st_size // 1024**2} MiB)")
    return target


async def import_rootfs(
    docker: aiodocker.Docker,
    tarball: Path,
    repo: str,
    tag: str,
    progress: Progress,
    *,
    label: tuple[str, str] | None = None,
) -> None:
    """``docker import`` through the Engine API, streaming the tarball from disk."""
    progress(f"rootfs: importing {tarball.name} as {repo}:{tag}")
    params = {"fromSrc": "-", "repo": repo, "tag": tag}
    if label is not None:
        params["changes"] = f"LABEL {label[0]}={label[1]}"
    async with docker._query(  # aiodocker has no wrapper for image import from a tarball
        "images/create",
        "POST",
        params=params,
        data=_read_chunks(tarball),
        headers={"Content-Type": "application/x-tar"},
        timeout=None,
    ) as response:
        async for line in response.content:
            if not line.strip():
                continue
            message = json.loads(line)
            if "error" in message:
                raise ImageBuildError(f"docker import failed: {message['error']}")
    progress(f"rootfs: imported {repo}:{tag}")


def _apt_sources(apt_dir: Path) -> Iterable[tuple[list[str], list[str]]]:
    """``(uris, suites)`` of every enabled ``deb`` source, one-line and deb822 formats."""
    one_line = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if path.is_file():
            for raw in path.read_text().splitlines():
                words = re.sub(r"\[[^\]]*\]", "", raw.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    yield [words[1]], [words[2]]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = _deb822(stanza)
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                yield fields.get("uris", "").split(), fields.get("suites", "").split()


def _deb822(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = ""
    for line in stanza.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace() and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()
    return fields


def _slim(root: Path) -> None:
    # Package caches and lists are large and stale by the time the image is used.
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"):
        for path in root.glob(pattern):
            if path.is_file():
                path.unlink()


def _run(argv: list[str], progress: Progress, what: str) -> None:
    """Run a local tool (never docker), relaying its output lines as progress."""
    tail: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail = [*tail[-19:], line]
            if line.startswith(_PER_PACKAGE):
                continue  # one line per package: too chatty for a progress display
            progress(f"{what}: {line}")
    if proc.returncode != 0:
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


async def _read_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as stream:
        while chunk := await asyncio.to_thread(stream.read, _CHUNK):
            yield chunk


def _arch() -> str:
    return os.uname().machine
