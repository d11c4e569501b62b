"""The node files sessions see read-only (bind mounts): each session's own under
``files_root/sessions/<id>``, the hook and the tools once per node under
``files_root/shared/<digest of their content>``, and the host directories a spec asks for.
Written whole (a file replaced atomically, a shared directory renamed into place), so a
session never sees half a file."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from gpuslice.session_tools import CONTAINER_ENDPOINT_DIR, CONTAINER_TOOLS_DIR, is_program


def write_session_files(
    root: Path, files: dict[str, bytes], shared_dir: Path, shared: dict[str, bytes]
) -> None:
    """A session's own files under ``root``, and the shared ones under ``shared_dir`` unless
    they are there already (a directory named by their content is never changed: it is made
    whole beside it, then renamed into place)."""
    if not shared_dir.is_dir():
        partial = shared_dir.with_name(f".{shared_dir.name}.{os.getpid()}.{time.monotonic_ns()}")
        _write_files(partial, shared)
        try:
            os.rename(partial, shared_dir)
        except OSError:  # another start made it first
            shutil.rmtree(partial, ignore_errors=True)
    _write_files(root, files)
    # The in-session endpoint's socket appears here (the agent's endpoint server makes it);
    # the directory is mounted whether or not the server runs, so it must exist first.
    (root / CONTAINER_ENDPOINT_DIR.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` under ``root`` at their container paths, each replaced atomically:
    a session reading its allocation never sees half a file."""
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if target.is_file() and target.read_bytes() == content:
            continue
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(content)
        partial.chmod(0o755 if _is_program(path) else 0o644)
        os.replace(partial, target)
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    root.chmod(0o755)


def _is_program(path: str) -> bool:
    directory, _, name = path.rpartition("/")
    return directory == CONTAINER_TOOLS_DIR and is_program(name)


def make_host_dir(path: str, uid: int, gid: int) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, 0o700)
