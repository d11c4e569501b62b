"""Engine and session factory, built by the app at start (never at import time)."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from gpuslice.manager.db import sqlite
from gpuslice.manager.events import HUB_KEY, Hub, HubSession

SQLITE_BUSY_TIMEOUT_S = 30.0


def make_engine(url: str, *, pool_size: int = 10, echo: bool = False,
                busy_timeout: float = SQLITE_BUSY_TIMEOUT_S) -> AsyncEngine:
    """An async engine; on SQLite with WAL, foreign keys and a busy timeout on every connection."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            private_database_file(Path(parsed.database))
        database, options = _sqlite_connect_args(parsed, timeout=busy_timeout)
        engine = create_async_engine(
            url, echo=echo, async_creator=sqlite.connector(database, **options))
        event.listen(engine.sync_engine, "connect", functools.partial(
            _sqlite_pragmas, busy_ms=round(busy_timeout * 1000)))
        return engine
    engine = create_async_engine(url, echo=echo, pool_size=pool_size, max_overflow=pool_size)
    event.listen(engine.sync_engine, "checkin", _note_checkin)
    event.listen(engine.sync_engine, "checkout", _ping_if_idle)
    return engine


# A pooled connection is tested before use only if it sat unused this long. SQLAlchemy's
# pool_pre_ping tests it at every checkout: with asyncpg that is BEGIN, an empty query and
# COMMIT, three round trips costing ~1 ms of CPU on a ~4 ms heartbeat. A connection in steady
# use (the manager under load) is not tested; one that sat idle, when a database restart or a
# proxy's idle timeout may have closed it, is. A connection that breaks within the window fails
# its request (a 503: "the database is away"), and the pool then drops every connection older
# than that failure, as it does for any disconnect.
IDLE_PING_S = 2.0


def _note_checkin(dbapi_connection: Any, record: Any) -> None:
    record.info["checked_in"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    checked_in = record.info.get("checked_in")
    if checked_in is None or time.monotonic() - checked_in < IDLE_PING_S:
        return  # a new connection, or one in steady use
    try:
        dbapi_connection.ping()
    except Exception as exc:
        # The pool discards this connection and checks out another (a new one if need be).
        raise DisconnectionError(f"a pooled connection is closed: {exc}") from exc


def private_database_file(path: Path) -> None:
    """Create the SQLite file readable by its owner only (it holds password hashes, sessions'
    environment and logs), or make an existing one so; SQLite gives its -wal and -shm files the
    database file's mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for companion in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if companion.exists():
            companion.chmod(0o600)


def make_sessionmaker(engine: AsyncEngine, hub: Hub) -> async_sessionmaker[AsyncSession]:
    """Sessions that publish their queued wake-ups to ``hub`` after each commit."""
    return async_sessionmaker(
        engine, expire_on_commit=False, sync_session_class=HubSession, info={HUB_KEY: hub}
    )


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def _sqlite_connect_args(url: URL, **options: Any) -> tuple[str, dict[str, Any]]:
    """The file and ``sqlite3.connect`` options SQLAlchemy would open ``url`` with."""
    [database], defaults = url.get_dialect()().create_connect_args(url)
    return database, {**defaults, **options}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any, *, busy_ms: int) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")  # first: the next one may wait for a lock
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
