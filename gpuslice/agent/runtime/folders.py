"""Storage folders into a session: the assignment's mounts, checked against this node's root.

The manager names each folder by its path under the storage root (the same path on every
node, where the admin mounts the shared filesystem) and the name it gets in the session,
``/home/work/<name>``. Nothing is taken on trust: a path with ``..``, ``.``, an empty part or a
leading ``/`` is refused, and so is any part of it that is a symbolic link (checked with
``lstat``, one part at a time), so a mount can never resolve outside the root. Inside the
folder links do not matter: in the container they resolve in the container's own filesystem.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from gpuslice.agent.runtime.spec import Mount, SpecError
from gpuslice.common.schemas.agents import FolderMount

HOME = "/home/work"
_NAME = re.compile(r"^\.?[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def folder_mounts(storage_root: Path | None, mounts: Sequence[FolderMount]) -> tuple[Mount, ...]:
    """Bind mounts for ``mounts``; :class:`SpecError` naming the first that cannot be."""
    if not mounts:
        return ()
    if storage_root is None:
        raise SpecError("this node has no storage_root, so its folders cannot be mounted "
                        "(set GPUSLICE_AGENT_STORAGE_ROOT to the storage's path here)")
    root = storage_root.resolve()  # the admin's own setting may be a link; what is under it not
    out: list[Mount] = []
    for mount in mounts:
        if mount.name in (".", "..") or not _NAME.match(mount.name):
            raise SpecError(f"folder name {mount.name!r} is not one path component")
        if any(m.target == f"{HOME}/{mount.name}" for m in out):
            raise SpecError(f"two folders are named {mount.name}")
        source = _inside(root, mount.path)
        out.append(Mount(source=str(source), target=f"{HOME}/{mount.name}",
                         read_only=mount.read_only))
    return tuple(out)


def _inside(root: Path, path: str) -> Path:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SpecError(f"folder path {path!r} would leave the storage root")
    current = root
    for part in parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise SpecError(f"folder {path} is not under the storage root {root} on this node "
                            "(is the shared filesystem mounted there?)") from None
        if stat.S_ISLNK(st.st_mode):
            raise SpecError(f"folder path {path}: {part} is a symbolic link; folders are "
                            "never reached through links") from None
        if not stat.S_ISDIR(st.st_mode):
            raise SpecError(f"folder path {path}: {part} is not a directory")
    return current
