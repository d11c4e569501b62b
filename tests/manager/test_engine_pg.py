"""The engine's pooled connections on PostgreSQL: tested before use only after sitting idle."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gpuslice.manager.db import engine as engines
from tests.conftest import pg_url

pytestmark = [
    pytest.mark.pg,
    pytest.mark.skipif(pg_url() is None, reason="needs PostgreSQL: set GPUSLICE_TEST_PG"),
]


async def _closed_by_the_server(engine: AsyncEngine) -> int:
    """Pool one connection, then have the server end it (as a restart or a proxy's idle
    timeout does); its backend's pid."""
    async with engine.connect() as conn:
        pid = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
    admin = create_async_engine(engine.url.render_as_string(hide_password=False),
                                isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await admin.dispose()
    return pid


async def test_an_idle_connection_closed_by_the_server_is_replaced_before_use(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines.make_engine(database_url, pool_size=1)
    try:
        pid = await _closed_by_the_server(engine)
        monkeypatch.setattr(engines, "IDLE_PING_S", 0.0)  # every pooled connection is "idle"
        async with engine.connect() as conn:
            now = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        assert now != pid
    finally:
        await engine.dispose()


async def test_a_connection_in_steady_use_is_not_tested_first(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines.make_engine(database_url, pool_size=1)
    try:
        await _closed_by_the_server(engine)
        monkeypatch.setattr(engines, "IDLE_PING_S", 3600.0)
        with pytest.raises(DBAPIError):  # no test before use: the closed one is used, and fails
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        async with engine.connect() as conn:  # the failure dropped it; the next one is new
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
