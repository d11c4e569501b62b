"""Who has an SQLite database open: managers share it, a restore must have it alone.

A manager (`manager serve`, `gpuslice up`) holds a shared ``flock`` on ``<database>.in-use``
for as long as its database is open; `gpuslice admin restore` takes an exclusive one, without
waiting, for the whole restore. So a restore into the live database of a running manager is
refused (it would pull the database from under it: the agent then stops every session and the
admin's login no longer matches), and a manager does not start in the middle of a restore. The
kernel drops the lock with its process, however it ends. PostgreSQL needs none of this: the
restore counts the server's other clients instead.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url

SUFFIX = ".in-use"


class InUse(Exception):
    """The database is held the other way; ``str()`` is one line."""


def database_file(url: str) -> Path | None:
    """The SQLite database file of ``url``; ``None`` for a server or an in-memory database."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" \
            or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def hold(database: Path, *, exclusive: bool) -> int:
    """Take the lock (shared: a manager; exclusive: a restore) and return its descriptor, to be
    given to `release`; :class:`InUse` when it is held the other way."""
    database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(f"{database}{SUFFIX}", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if exclusive:
            raise InUse(f"{database} is in use by a running manager (`gpuslice up` or "
                        "`gpuslice manager serve`): stop it, then restore") from None
        raise InUse(f"{database} is being restored (`gpuslice admin restore`): start the "
                    "manager once the restore has finished") from None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor drops the flock
