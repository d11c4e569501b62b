"""The manager's side of the faults a node or its database meets: a node whose Docker Engine is
away stays ALIVE with the reason shown and its images kept; the node sweep is not fooled by a
jump of the wall clock; a locked database is a 503 in one line; a schema from a newer
gpuslice is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine
from gpuslice.manager.db.faults import classify
from gpuslice.manager.services.nodes import liveness
from gpuslice.manager.settings import load_settings
from gpuslice.manager.startup import StartupError, open_database
from tests.manager.helpers import wait_status
from tests.waits import scaled

from .conftest import IMAGE, AgentFactory, Client, create


async def test_a_node_whose_docker_is_away_stays_alive_and_keeps_its_images(
    admin: Client, make_agent: AgentFactory,
) -> None:
    agent = await make_agent("n1")
    [session] = await create(admin, resources={"cpu": 1})
    await wait_status(admin, session["id"], {"RUNNING"})
    body = {"cpu": 1000, "mem": 2**30, "devices": [], "images": [], "running": [],
            "engine_error": "the Docker Engine is not running (no socket at /x.sock): start it"}
    r = await agent.client.post("/api/v1/agents/me/heartbeat", json=body)
    assert r.status_code == 200 and r.json()["status"] == "ALIVE"
    [node] = (await admin.get("/api/v1/nodes")).json()
    assert node["engine_error"] == body["engine_error"]
    assert node["images"] == [IMAGE] and node["cpu"] == 64  # what it knew, kept
    assert IMAGE in [i["name"] for i in (await admin.get("/api/v1/images")).json()]
    r = await admin.get(f"/api/v1/sessions/{session['id']}")
    assert r.json()["status"] == "RUNNING" and len(r.json()["history"]) == 4
    await agent.heartbeat()  # Docker back: a full heartbeat clears it
    [node] = (await admin.get("/api/v1/nodes")).json()
    assert node["engine_error"] is None


def test_the_sweep_waits_one_timeout_after_start_and_after_a_clock_jump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = {"mono": 1000.0, "wall": 1_700_000_000.0}
    monkeypatch.setattr(liveness.time, "monotonic", lambda: now["mono"])
    monkeypatch.setattr(liveness.time, "time", lambda: now["wall"])

    def advance(seconds: float, jump: float = 0.0) -> None:
        now["mono"] += seconds
        now["wall"] += seconds + jump

    grace = liveness.SweepGrace(30)
    assert not grace.allows_sweep()  # just started
    advance(31)
    assert grace.allows_sweep()
    advance(2, jump=7200)  # NTP stepped the clock two hours forward
    assert not grace.allows_sweep()
    advance(29)
    assert not grace.allows_sweep()
    advance(2)
    assert grace.allows_sweep()
    advance(2, jump=1.0)  # drift, not a jump
    assert grace.allows_sweep()


def test_a_connection_cut_while_opening_is_the_database_unreachable() -> None:
    # asyncpg's word for a server that hung up during the TLS negotiation (met in CI while
    # the tests' proxy cut the database)
    url = "postgresql+asyncpg://u@db.example:5432/gpuslice"
    fault = classify(ConnectionError("unexpected connection_lost() call"), url)
    assert fault is not None and fault.kind == "unreachable"


async def test_a_locked_sqlite_database_is_a_503_in_one_line(
    migrated_database_url: str,
) -> None:
    database_url = migrated_database_url
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite's locking")
    path = database_url.split(":///", 1)[1]
    # No manager runs on this database: nothing else writes, so the lock is the test's to take
    # (a running app's loops write now and then, and a lock taken beside them races them).
    holder = sqlite3.connect(path, isolation_level=None, timeout=scaled(10))
    holder.execute("BEGIN IMMEDIATE")
    try:
        # the app's busy timeout is 30 s: a write of this test's own engine with a short one
        engine = make_engine(database_url, busy_timeout=0.2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE users SET is_active = is_active"))
        except Exception as exc:
            fault = classify(exc, database_url)
        else:
            raise AssertionError("the write went through a held lock")
        finally:
            await engine.dispose()
    finally:
        holder.close()
    assert fault is not None and fault.kind == "locked"
    assert fault.sentence().startswith(f"the SQLite database {path} is locked by another "
                                       "program: stop whatever else holds it")


async def test_a_schema_from_a_newer_gpuslice_is_refused_untouched(
    database_url: str, tmp_path: Path,
) -> None:
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = 'i99_future'"))
    finally:
        await engine.dispose()
    settings = load_settings(data_dir=tmp_path / "data", database={"url": database_url})
    with pytest.raises(StartupError) as refused:
        await open_database(settings)
    assert str(refused.value).startswith(
        "the database was migrated by a newer gpuslice (schema revision i99_future")
    engine = make_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT version_num FROM alembic_version"))
                    ).scalar_one() == "i99_future"
    finally:
        await engine.dispose()
