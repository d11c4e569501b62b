"""Run the Alembic tree programmatically on the app's async engine (SQLite or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS = Path(__file__).with_name("migrations")
# Two managers starting together on one PostgreSQL take turns (any fixed 64-bit number).
_PG_LOCK_ID = 0x6770_7573_6C69_6365 & 0x7FFF_FFFF_FFFF_FFFF


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code knows (one head: the tree is linear)."""
    found = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(found) != 1:
        raise RuntimeError(f"the migration tree has {len(found)} heads: {found}")
    return found[0]


def previous(revision: str) -> str | None:
    """The revision ``revision`` was migrated from (None for the first)."""
    script = ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    down = script.down_revision if script is not None else None
    return down if isinstance(down, str) or down is None else down[0]


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    await _run(engine, lambda cfg: command.upgrade(cfg, revision))


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    await _run(engine, lambda cfg: command.downgrade(cfg, revision))


async def _run(engine: AsyncEngine, action: object) -> None:
    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
        action(alembic_config(connection))  # type: ignore[operator]

    async with engine.begin() as conn:
        await conn.run_sync(run)
