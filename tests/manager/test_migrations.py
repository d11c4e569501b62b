"""The Alembic tree is tested code: upgrade head, compare with the models, downgrade base."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect

from gpuslice.manager.db import migrate
from gpuslice.manager.db.base import Base
from gpuslice.manager.db.engine import make_engine


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return compare_metadata(context, Base.metadata)


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names()) - {"alembic_version"}


async def test_upgrade_matches_models_then_downgrade(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
            assert await conn.run_sync(_tables) == set(Base.metadata.tables)
        await migrate.upgrade(engine)  # idempotent: already at head
        await migrate.downgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == set()
    finally:
        await engine.dispose()
