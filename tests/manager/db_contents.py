"""A database's contents as the backup and upgrade tests compare them: every row of every
table, read by reflection (not through the code under test), normalised so that two engines'
rows of the same data are equal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Connection, MetaData, select
from sqlalchemy.ext.asyncio import create_async_engine

Tables = dict[str, list[tuple[Any, ...]]]


async def contents(url: str) -> Tables:
    """Every row of every table, normalised (UTC datetimes, parsed JSON), sorted."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_read_all)
    finally:
        await engine.dispose()


def _read_all(connection: Connection) -> Tables:
    metadata = MetaData()
    metadata.reflect(connection)
    out: Tables = {}
    for table in metadata.sorted_tables:
        if table.name == "alembic_version":
            continue
        json_columns = [isinstance(c.type, JSON) for c in table.columns]
        rows = connection.execute(select(table)).all()
        out[table.name] = sorted(
            (tuple(_normal(v, j) for v, j in zip(row, json_columns, strict=True)) for row in rows),
            key=repr,
        )
    return out


def _normal(value: Any, is_json: bool) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if is_json and isinstance(value, str):  # some drivers hand JSON over as text
        return json.loads(value)
    return value
