"""Liveness and readiness, as a load balancer or a service manager reads them."""

from __future__ import annotations

import asyncio
import re
import time

from fastapi import FastAPI
from sqlalchemy import text

from gpuslice.manager.db import migrate
from gpuslice.manager.loops import LoopState, supervise
from tests.manager.conftest import Client


async def test_a_started_manager_is_live_and_ready(anon: Client) -> None:
    assert (await anon.get("/api/v1/health/live")).json() == {"status": "ok"}
    r = await anon.get("/api/v1/health/ready")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "migrations", "scheduler", "node_sweep"}
    assert body["checks"]["migrations"]["detail"] == f"revision {migrate.head()} (head)"


async def test_not_ready_when_the_schema_is_not_this_codes_head(
    app: FastAPI, anon: Client
) -> None:
    head = migrate.head()
    async with app.state.sessionmaker() as db:
        await db.execute(text("UPDATE alembic_version SET version_num = 'zzzz_newer'"))
        await db.commit()
    try:
        r = await anon.get("/api/v1/health/ready")
        assert r.status_code == 503
        check = r.json()["checks"]["migrations"]
        assert check == {"ok": False, "detail": "database at revision zzzz_newer; "
                                                f"this manager's head is {head}"}
        # liveness does not depend on it: a service manager must not restart the process
        assert (await anon.get("/api/v1/health/live")).status_code == 200
    finally:
        async with app.state.sessionmaker() as db:
            await db.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
            await db.commit()


async def test_not_ready_when_the_scheduler_loop_died(app: FastAPI, anon: Client) -> None:
    [task] = [t for t in asyncio.all_tasks() if t.get_name() == "gpuslice-scheduler"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    app.state.loops["scheduler"].beat = time.monotonic() - 3600  # as if it died an hour ago
    r = await anon.get("/api/v1/health/ready")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready"
    assert body["checks"]["scheduler"]["ok"] is False
    # the hour, plus however long the request took on a busy machine (a second, rounded up)
    said = re.search(r"scheduler has not run for (\d+) s", body["checks"]["scheduler"]["detail"])
    assert said is not None and 3600 <= int(said[1]) <= 3610
    assert body["checks"]["database"]["ok"] is True


async def test_a_loop_that_keeps_failing_is_a_problem() -> None:
    state = LoopState("node sweep", 0.01)

    async def fail() -> None:
        raise RuntimeError("database is locked")

    loop = asyncio.create_task(supervise("node sweep", fail, interval=0.01, state=state))
    try:
        while state.failures < 3:
            await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert state.problem() == (  # anyone may ask: what failed is in the log, not here
        f"node sweep failed {state.failures} times in a row (RuntimeError; the manager's log "
        "says why)"
    )
