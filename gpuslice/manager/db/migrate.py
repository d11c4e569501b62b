"""Run the Alembic tree programmatically on the app's async engine (SQLite or PostgreSQL)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gpuslice import __version__

MIGRATIONS = Path(__file__).with_name("migrations")
# Two managers starting together on one PostgreSQL take turns (any fixed 64-bit number).
_PG_LOCK_ID = 0x6770_7573_6C69_6365 & 0x7FFF_FFFF_FFFF_FFFF


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


class SchemaMismatch(RuntimeError):
    """The database's schema is not one this code can run on; ``str()`` is one line."""


def head() -> str:
    """The newest revision this code knows (one head: the tree is linear)."""
    found = _scripts().get_heads()
    if len(found) != 1:
        raise RuntimeError(f"the migration tree has {len(found)} heads: {found}")
    return found[0]


def previous(revision: str) -> str | None:
    """The revision ``revision`` was migrated from (None for the first)."""
    script = _scripts().get_revision(revision)
    down = script.down_revision if script is not None else None
    return down if isinstance(down, str) or down is None else down[0]


def known(revision: str) -> bool:
    """Whether this code's migration tree has ``revision``."""
    try:
        return _scripts().get_revision(revision) is not None
    except Exception:  # alembic raises its own errors for unknown or ambiguous ids
        return False


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Migrate to ``revision``; :class:`SchemaMismatch` when the database was migrated by a
    newer gpuslice (an older code must not run on, nor "downgrade" by accident, a newer
    schema)."""
    async with engine.begin() as conn:
        await conn.run_sync(upgrade_on, revision)


async def check_current(engine: AsyncEngine) -> None:
    """:class:`SchemaMismatch` unless the database is at this code's head revision (for a
    manager that does not migrate at start)."""

    def check(connection: Connection) -> None:
        _refuse_unknown(connection)
        current = set(MigrationContext.configure(connection).get_current_heads())
        heads = set(_scripts().get_heads())
        if current != heads:
            raise SchemaMismatch(
                f"the database's schema is at revision {', '.join(sorted(current)) or 'none'}, "
                f"this gpuslice needs {', '.join(sorted(heads))}: start it once with "
                "database.migrate_on_start = true"
            )

    async with engine.connect() as conn:
        await conn.run_sync(check)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: _locked(c, lambda cfg: command.downgrade(cfg, revision)))


def upgrade_on(connection: Connection, revision: str = "head") -> None:
    """Upgrade inside the caller's transaction (a restore runs it with its own work)."""

    def check_then_upgrade(cfg: Config) -> None:
        _refuse_unknown(connection)
        if revision == "head" and _at_head(connection):
            return  # most starts: alembic's own run would load its environment to do nothing
        command.upgrade(cfg, revision)

    _locked(connection, check_then_upgrade)


def current_on(connection: Connection) -> str | None:
    """The revision the connected database is at (None: never migrated)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _refuse_unknown(connection: Connection) -> None:
    current = MigrationContext.configure(connection).get_current_heads()
    known_ids = {script.revision for script in _scripts().walk_revisions()}
    unknown = sorted(set(current) - known_ids)
    if unknown:
        raise SchemaMismatch(
            f"the database was migrated by a newer gpuslice (schema revision "
            f"{', '.join(unknown)}, unknown to gpuslice {__version__}): run that newer version, "
            "or restore a backup of the database taken before the upgrade"
        )


def _locked(connection: Connection, action: Callable[[Config], None]) -> None:
    # Managers upgrading at once on one PostgreSQL take turns: the lock lasts until the
    # transaction ends, so the second finds the schema at head and does nothing.
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
    action(alembic_config(connection))


def _at_head(connection: Connection) -> bool:
    current = set(MigrationContext.configure(connection).get_current_heads())
    return current == set(_scripts().get_heads())


@functools.cache
def _scripts() -> ScriptDirectory:
    # Read once per process: the tree is this package's own files, which do not change under
    # a running manager (parsing every revision took ~20 ms a call, several calls a start).
    return ScriptDirectory.from_config(alembic_config())
