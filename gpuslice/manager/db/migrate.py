"""Run the Alembic tree programmatically on the app's async engine (SQLite or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
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
