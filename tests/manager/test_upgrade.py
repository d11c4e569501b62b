"""Upgrading: a database filled at the previous release's schema (the migration before the newest)
with sessions in every status is migrated to head, then checked row by row and operated on.

The filling goes through the tables as they are at that revision (reflected), never through the
models, which are head's: what an older release wrote is what is upgraded. Columns this test does
not name get a plain value of their type, so the test keeps working as migrations are added.
Also: two managers upgrading one PostgreSQL at once take turns (the advisory lock).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from sqlalchemy import JSON, Boolean, Connection, DateTime, Integer, MetaData, Table, select
from sqlalchemy.ext.asyncio import create_async_engine

from gpuslice.manager.app import create_app
from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine
from gpuslice.manager.security import token_digest
from gpuslice.manager.settings import ManagerSettings
from tests.conftest import pg_url
from tests.manager.conftest import client_for, login
from tests.manager.db_contents import contents
from tests.manager.fake_agent import FakeAgent, GiB, gpu
from tests.manager.helpers import wait_until
from tests.waits import scaled

TOKEN = "gsu_" + "t" * 43
NODE_CREDENTIAL = "gsn_" + "n" * 43
STATUSES = ["PENDING", "SCHEDULED", "PREPARING", "RUNNING", "TERMINATING", "TERMINATED", "ERROR",
            "CANCELLED"]
HOLDING = {"SCHEDULED", "PREPARING", "RUNNING", "TERMINATING"}
SLICE = 250  # milli-fGPU per holding session: 4 × 250 of the device's 2000


def _plain(column: Any) -> Any:
    """A value for a NOT NULL column the test does not name."""
    kind = column.type
    if isinstance(kind, JSON):
        return {}
    if isinstance(kind, Boolean):
        return False
    if isinstance(kind, DateTime):
        return datetime.now(UTC)
    if isinstance(kind, Integer):
        return 0
    return ""


def _insert(connection: Connection, table: Table, **values: Any) -> None:
    for column in table.columns:
        if (column.name not in values and not column.nullable and column.server_default is None
                and not (column.primary_key and isinstance(column.type, Integer))):
            values[column.name] = _plain(column)
    connection.execute(table.insert().values(**values))


def _fill(connection: Connection) -> dict[str, str]:
    """What an older release wrote: users, a policy, a token, a node with a GPU, an image and
    its alias, and one session per status with its history (holding ones with their slice)."""
    t = MetaData()
    t.reflect(connection)
    now = datetime.now(UTC) - timedelta(minutes=5)
    ids = {"policy": str(uuid.uuid4()), "admin": str(uuid.uuid4()), "alice": str(uuid.uuid4()),
           "node": str(uuid.uuid4())}
    _insert(connection, t.tables["resource_policies"], id=ids["policy"], name="p-alice",
            max_sessions=10, max_priority=0, created_at=now)
    hasher = PasswordHasher()
    for name, role in (("admin", "admin"), ("alice", "user")):
        _insert(connection, t.tables["users"], id=ids[name], username=name, role=role,
                password_hash=hasher.hash(f"password-{name}"), is_active=True, created_at=now,
                policy_id=ids["policy"] if name == "alice" else None)
    _insert(connection, t.tables["api_tokens"], id=str(uuid.uuid4()), user_id=ids["alice"],
            kind="api", name="ci", token_hash=token_digest(TOKEN), created_at=now)
    held = len(HOLDING)
    _insert(connection, t.tables["nodes"], id=ids["node"], name="old-node", pool="default",
            credential_hash=token_digest(NODE_CREDENTIAL), status="ALIVE",
            device_capacity=2000, cpu=8000, mem=64 * GiB, cpu_used=held * 1000,
            mem_used=held * GiB, images=["python:3.11"], usage={}, assignment_version=7,
            registered_at=now, last_heartbeat_at=now)
    connection.execute(t.tables["devices"].insert().values(
        id=1, node_id=ids["node"], index=0, uuid="GPU-old-0", model="Mock A100", mem=40 * GiB,
        sms=108, capacity=2000, used=held * SLICE))
    _insert(connection, t.tables["images"], name="python:3.11", allowed=True, public=True,
            labels={}, created_at=now)
    _insert(connection, t.tables["image_aliases"], name="py", reference="python:3.11",
            created_at=now)
    for n, status in enumerate(STATUSES):
        sid = ids[status] = str(uuid.uuid4())
        _insert(connection, t.tables["sessions"], id=sid, name=f"s-{status.lower()}",
                owner_id=ids["alice"], image="python:3.11", type="interactive", command=None,
                env={"N": str(n)}, priority=0, pool="default", gpu=SLICE, cpu=1000, mem=GiB,
                status=status, status_reason=f"was {status}", created_at=now, updated_at=now,
                node_id=ids["node"] if status not in ("PENDING", "CANCELLED") else None,
                result="SUCCESS" if status == "TERMINATED" else None,
                exit_code=0 if status == "TERMINATED" else None)
        _insert(connection, t.tables["status_history"], session_id=sid, owner_id=ids["alice"],
                from_status=None, to_status="PENDING", reason="created", at=now)
        if status != "PENDING":
            _insert(connection, t.tables["status_history"], session_id=sid,
                    owner_id=ids["alice"], from_status="PENDING", to_status=status,
                    reason=f"to {status}", at=now)
        if status in HOLDING or status in ("TERMINATED", "ERROR"):
            _insert(connection, t.tables["allocations"], session_id=sid, device_id=1,
                    device_index=0, device_uuid="GPU-old-0", device_model="Mock A100",
                    device_capacity=2000, gpu=SLICE, mem=5 * GiB, sms=13, created_at=now,
                    released_at=None if status in HOLDING else now)
    return ids


async def test_a_database_of_the_previous_revision_upgrades_whole_and_works(
    settings: ManagerSettings,
) -> None:
    previous = migrate.previous(migrate.head())
    assert previous is not None, "the tree has one revision: nothing to upgrade from"
    url = settings.database_url
    engine = make_engine(url)
    try:
        await migrate.upgrade(engine, previous)
        async with engine.begin() as conn:
            ids = await conn.run_sync(_fill)
    finally:
        await engine.dispose()
    before = await contents(url)

    engine = make_engine(url)
    try:
        await migrate.upgrade(engine)  # what `manager serve` does at start
        async with engine.connect() as conn:
            assert await conn.run_sync(migrate.current_on) == migrate.head()
    finally:
        await engine.dispose()
    after = await contents(url)
    _same_rows(before, after)
    await _operate(settings, ids)


def _same_rows(before: dict[str, list[tuple[Any, ...]]],
               after: dict[str, list[tuple[Any, ...]]]) -> None:
    """Every row is still there with its values (new columns may follow the old ones)."""
    assert set(before) <= set(after)
    for table, rows in before.items():
        assert len(after[table]) == len(rows), table
        width = len(rows[0]) if rows else 0
        assert sorted(r[:width] for r in after[table]) == sorted(rows), table


async def _operate(settings: ManagerSettings, ids: dict[str, str]) -> None:
    """The upgraded platform: logins and the old token work, each session kept its status and
    history, capacity is as it was, and a node coming back drives every session on."""
    app = create_app(settings)
    async with app.router.lifespan_context(app), client_for(app, TOKEN) as alice:
        anon = client_for(app)
        async with anon:
            admin_token = await login(anon, "admin", "password-admin")
        for status in STATUSES:
            body = (await alice.get(f"/api/v1/sessions/{ids[status]}")).json()
            old = ["PENDING"] if status == "PENDING" else ["PENDING", status]
            assert [h["status"] for h in body["history"]][:len(old)] == old, body
            # the scheduler may already have placed the waiting one; nothing else moved
            assert body["status"] == status or (status, body["status"]) == (
                "PENDING", "SCHEDULED"), body
        async with client_for(app, admin_token) as admin:
            await wait_until(alice, [ids["PENDING"]], lambda s: s[0]["status"] == "SCHEDULED")
            [node] = (await admin.get("/api/v1/nodes")).json()
            assert node["name"] == "old-node"  # its capacity: the old slices plus the new one
            assert node["devices"][0]["used"] == (len(HOLDING) + 1) * SLICE / 1000
            agent = _ReturningAgent(app, ids["node"])
            await agent.start()
            try:
                states = await wait_until(alice, [ids[s] for s in STATUSES], lambda s: [
                    x["status"] for x in s] == ["RUNNING", "RUNNING", "RUNNING", "RUNNING",
                                                 "TERMINATED", "TERMINATED", "ERROR",
                                                 "CANCELLED"], timeout=10)
                assert [x["status"] for x in states] == [
                    "RUNNING", "RUNNING", "RUNNING", "RUNNING", "TERMINATED", "TERMINATED",
                    "ERROR", "CANCELLED"], [(x["name"], x["status"]) for x in states]
            finally:
                await agent.stop()


class _ReturningAgent(FakeAgent):
    """The node of before the upgrade, back with the credential it kept (no new join)."""

    def __init__(self, app: Any, node_id: str) -> None:
        super().__init__(client_for(app, NODE_CREDENTIAL), "", "old-node",
                         devices=[gpu(0) | {"uuid": "GPU-old-0"}], cpu=8000, mem=64 * GiB)
        self.node_id = node_id

    async def start(self) -> None:
        await self.heartbeat()
        self._task = asyncio.create_task(self._follow())

    async def _reconcile(self, answer: dict[str, Any]) -> None:
        # as the real agent does, a session left PREPARING is started (its container is not
        # there); the fake's own reconcile starts SCHEDULED ones only
        for item in answer["sessions"]:
            if item["status"] == "PREPARING" and item["desired"] == "running":
                self.running.add(item["session_id"])
                await self.report(item["session_id"], "RUNNING")
        await super()._reconcile(answer)


@pytest.mark.pg
@pytest.mark.skipif(pg_url() is None, reason="needs GPUSLICE_TEST_PG")
async def test_managers_starting_together_migrate_once(database_url: str, tmp_path: Path) -> None:
    engines = [make_engine(database_url) for _ in range(3)]
    try:
        # without the advisory lock they deadlock on each other's DDL (or fail): bounded
        await asyncio.wait_for(asyncio.gather(*(migrate.upgrade(e) for e in engines)), scaled(120))
        async with engines[0].connect() as conn:
            assert await conn.run_sync(migrate.current_on) == migrate.head()
            versions = (await conn.exec_driver_sql("SELECT count(*) FROM alembic_version")
                        ).scalar()
            assert versions == 1
    finally:
        for engine in engines:
            await engine.dispose()
    check = create_async_engine(database_url)
    try:
        async with check.connect() as conn:
            assert (await conn.execute(select(1))).scalar() == 1
    finally:
        await check.dispose()
