"""The directories gpuslice keeps its state in on this machine, and the lock on each.

``prepare_dir`` makes a data directory (mode 0700) and proves it usable before anything is
written there: a directory that cannot be written, is on a read-only filesystem or has no space
left is one sentence naming it and what to do (:class:`DirProblem`), never a traceback halfway
through a start.

``DirLock`` keeps two processes from running on one directory: `gpuslice up` twice, or two
agents, would both register the node and fight over its containers. It is an ``fcntl.flock`` on
a file in the directory, held for the life of the process, so the kernel releases it when the
holder dies, however it dies (a SIGKILL leaves no stale lock). The file also says who holds it
(pid, port, ...) for the refusal's message; a holder that stops cleanly empties it, so a file
found non-empty with its lock free is the trace of one that was killed.

Standard library only: the CLI imports this before deciding whether to start anything.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

# Below this much free space a data directory counts as full: SQLite needs room for its
# write-ahead log, and a start that fails on its first write helps nobody.
MIN_FREE_BYTES = 64 * 2**20


class DirProblem(Exception):
    """A data directory that cannot be used; ``str()`` is one line for the user."""


class Busy(Exception):
    """Another live process holds the lock; ``holder`` is what it wrote (pid, port, ...)."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        super().__init__(f"{path} is locked by pid {holder.get('pid', '?')}")
        self.path = path
        self.holder = holder


def prepare_dir(path: Path, option: str, min_free: int = MIN_FREE_BYTES) -> Path:
    """Create ``path`` (0700) if needed and check that files can be written there with room to
    spare; ``option`` names the setting that chose it (``--data-dir``) for the message."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.is_dir():
            raise DirProblem(f"{path} is not a directory: pick another with {option}")
        probe = path / f".write-test-{os.getpid()}"
        try:
            probe.write_bytes(b"\0" * 4096)
        finally:
            probe.unlink(missing_ok=True)
        stats = os.statvfs(path)
    except FileExistsError:
        raise DirProblem(f"{path} is not a directory: pick another with {option}") from None
    except OSError as err:
        raise DirProblem(describe_os_error(err, path, option)) from None
    free = stats.f_bavail * stats.f_frsize
    if free < min_free:
        raise DirProblem(
            f"the data directory {path} is full ({free // 2**20} MiB free, gpuslice needs at "
            f"least {min_free // 2**20} MiB): free some space, or pick another with {option}"
        )
    return path


def describe_os_error(err: OSError, path: Path, option: str) -> str:
    """One line for a failure to write in a data directory, naming what to do."""
    where = f"the data directory {path}"
    if err.errno in (errno.EACCES, errno.EPERM):
        return (f"cannot write to {where} (permission denied): fix its permissions, or pick "
                f"one you own with {option}")
    if err.errno == errno.EROFS:
        return f"{where} is on a read-only filesystem: pick another with {option}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{where} is full (no space left): free some space, or pick another with {option}"
    if err.errno == errno.ENOTDIR:
        return f"{where} is inside a file, not a directory: pick another with {option}"
    return f"cannot use {where} ({err.strerror or err}): pick another with {option}"


class DirLock:
    """An exclusive lock on a directory for this process's life (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, **info: Any) -> dict[str, Any] | None:
        """Take the lock and record ``info`` (with our pid) in its file. Raises :class:`Busy`
        when a live process holds it. Returns what a previous holder left when it died without
        releasing (killed), else ``None``."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd, wait=True)
            os.close(fd)
            raise Busy(self.path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        previous = _read_holder(fd) or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), **info}).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return previous

    def release(self) -> None:
        """Empty the file (a clean stop) and let go; the file stays, so that no other process
        can be holding a lock on a file that a third one no longer sees."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int, wait: bool = False) -> dict[str, Any]:
    # A holder that took the lock an instant ago may not have written yet: give it a moment.
    deadline = time.monotonic() + (1.0 if wait else 0.0)
    while True:
        raw = os.pread(fd, 4096, 0)
        try:
            found = json.loads(raw) if raw.strip() else {}
        except ValueError:
            found = {}
        if found or time.monotonic() >= deadline:
            return found if isinstance(found, dict) else {}
        time.sleep(0.05)
