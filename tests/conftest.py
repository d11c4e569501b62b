"""Shared fixtures: a fresh database per test (SQLite file, or GPUSLICE_TEST_PG PostgreSQL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

PG_URL = os.environ.get("GPUSLICE_TEST_PG")


def pg_url() -> str | None:
    """GPUSLICE_TEST_PG with the asyncpg driver (``postgresql://…`` is accepted too)."""
    if not PG_URL:
        return None
    url = make_url(PG_URL)
    return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


@pytest.fixture
async def database_url(tmp_path: Path) -> AsyncIterator[str]:
    """A new, empty database for this test only."""
    server = pg_url()
    if server is None:
        yield f"sqlite+aiosqlite:///{tmp_path / 'test.db'}"
        return
    name = f"gpuslice_test_{uuid.uuid4().hex[:16]}"
    admin = create_async_engine(server, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()
