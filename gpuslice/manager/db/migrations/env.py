"""Alembic environment: uses the connection handed over by ``gpuslice.manager.db.migrate``."""

from __future__ import annotations

from alembic import context

from gpuslice.manager.db import models  # noqa: F401  (registers the tables)
from gpuslice.manager.db.base import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "run migrations through gpuslice.manager.db.migrate (it supplies the connection)"
        )
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
