"""Opening the manager's database at start: reach it, bring its schema to this code's, make the
first admin. Every way this can fail that a person can fix (the database is down, locked, full,
missing, refuses the password, was migrated by a newer gpuslice) is a :class:`StartupError`
whose ``str()`` is one sentence, so that `manager serve` and `gpuslice up` refuse to start in
one line instead of a traceback. The CLI runs this before the server starts (a failure inside
uvicorn's lifespan can only be logged with its traceback); the app's lifespan runs it itself
when it was given no open database (tests, other ASGI servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gpuslice.manager.db import in_use, migrate
from gpuslice.manager.db.engine import make_engine, make_sessionmaker
from gpuslice.manager.db.faults import describe, safe_url
from gpuslice.manager.events import Hub
from gpuslice.manager.services.users import ensure_admin
from gpuslice.manager.settings import ManagerSettings


class StartupError(Exception):
    """The manager cannot start; ``str()`` says why and what to do, in one line."""


@dataclass(frozen=True, slots=True)
class Database:
    """An open, migrated database and the wake-up hub its sessions publish to."""

    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    hub: Hub
    # the shared hold on an SQLite database file (see db/in_use.py), dropped by `close`
    in_use: list[int] = field(default_factory=list)

    async def close(self) -> None:
        await self.engine.dispose()
        while self.in_use:
            in_use.release(self.in_use.pop())


async def open_database(settings: ManagerSettings) -> Database:
    """Connect, migrate (or check the schema), create the first admin; :class:`StartupError`
    on a failure a person can fix, with the engine closed again."""
    url = settings.database_url
    hub = Hub()
    held = _hold(url)
    engine = make_engine(
        url, pool_size=settings.database.pool_size, echo=settings.database.echo,
        busy_timeout=settings.database.busy_timeout,
    )
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        if settings.database.migrate_on_start:
            await migrate.upgrade(engine)
        else:
            await migrate.check_current(engine)
        sessionmaker = make_sessionmaker(engine, hub)
        await ensure_admin(sessionmaker, settings.auth.admin_username, settings.data_dir)
    except migrate.SchemaMismatch as err:
        await Database(engine, async_sessionmaker(), hub, held).close()
        raise StartupError(f"{err} ({safe_url(url)})") from None
    except Exception as err:
        await Database(engine, async_sessionmaker(), hub, held).close()
        sentence = describe(err, url)
        if sentence is None:
            raise
        raise StartupError(sentence) from None
    return Database(engine, sessionmaker, hub, held)


def _hold(url: str) -> list[int]:
    database = in_use.database_file(url)
    if database is None:
        return []
    try:
        return [in_use.hold(database, exclusive=False)]
    except in_use.InUse as err:
        raise StartupError(str(err)) from None
    except OSError:
        # a directory that cannot take the lock file cannot take the database's write-ahead
        # log either: opening the database says what is wrong, in its own words (faults.py)
        return []
