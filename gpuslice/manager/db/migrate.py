"""Run the Alembic tree programmatically on the app's async engine (SQLite or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
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


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Migrate to ``revision``; :class:`SchemaMismatch` when the database was migrated by a
    newer gpuslice (an older code must not run on, nor "downgrade" by accident, a newer
    schema)."""

    def check_then_upgrade(cfg: Config) -> None:
        _refuse_unknown(cfg.attributes["connection"])
        command.upgrade(cfg, revision)

    await _run(engine, check_then_upgrade)


async def check_current(engine: AsyncEngine) -> None:
    """:class:`SchemaMismatch` unless the database is at this code's head revision (for a
    manager that does not migrate at start)."""

    def check(cfg: Config) -> None:
        connection = cfg.attributes["connection"]
        _refuse_unknown(connection)
        current = set(MigrationContext.configure(connection).get_current_heads())
        heads = set(ScriptDirectory.from_config(alembic_config()).get_heads())
        if current != heads:
            raise SchemaMismatch(
                f"the database's schema is at revision {', '.join(sorted(current)) or 'none'}, "
                f"this gpuslice needs {', '.join(sorted(heads))}: start it once with "
                "database.migrate_on_start = true"
            )

    await _run(engine, check)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    await _run(engine, lambda cfg: command.downgrade(cfg, revision))


def _refuse_unknown(connection: Connection) -> None:
    current = MigrationContext.configure(connection).get_current_heads()
    known = {script.revision for script in
             ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    unknown = sorted(set(current) - known)
    if unknown:
        raise SchemaMismatch(
            f"the database was migrated by a newer gpuslice (schema revision "
            f"{', '.join(unknown)}, unknown to gpuslice {__version__}): run that newer version, "
            "or restore a backup of the database taken before the upgrade"
        )


async def _run(engine: AsyncEngine, action: object) -> None:
    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
        action(alembic_config(connection))  # type: ignore[operator]

    async with engine.begin() as conn:
        await conn.run_sync(run)
