"""Two managers' schedulers race on one PostgreSQL with preemption in the mix (issue 32): no
device is ever over-allocated, each winner preempts once (never two sets of victims), and no
preempted session is lost or placed twice."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import StateReport
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine, make_sessionmaker
from gpuslice.manager.db.models import (
    AllocationRow,
    DeviceRow,
    NodeRow,
    PriorityClassRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.errors import NotFound, StaleStatus
from gpuslice.manager.events import Hub
from gpuslice.manager.scheduler import Policy, SchedulerConfig, Strategy
from gpuslice.manager.services.lifecycle import transition
from gpuslice.manager.services.nodes.reports import report_state
from gpuslice.manager.services.scheduling import passes
from gpuslice.manager.services.scheduling.passes import run_pass
from gpuslice.manager.services.scheduling.snapshot import Snapshot
from tests.conftest import pg_url
from tests.manager.allocation_watch import watch_allocations

pytestmark = pytest.mark.pg
GiB = 1024**3
NODES, DEVICES, WINNERS = 4, 2, 6


@pytest.mark.skipif(pg_url() is None, reason="needs PostgreSQL: set GPUSLICE_TEST_PG")
async def test_two_schedulers_preempting_never_double_or_lose(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every GPU runs a low-class batch session; six high-class ones arrive. Two schedulers,
    meeting on their first pass, both want to preempt for the same winners: exactly six
    sessions are preempted (one per winner), every winner runs, and every victim is back in
    the queue or running again, never ended."""
    met, waited, real = asyncio.Barrier(2), set(), passes.load_snapshot

    async def meeting(db: AsyncSession, **kwargs: bool) -> Snapshot:
        snap = await real(db, **kwargs)
        if snap.pending and (task := asyncio.current_task()) not in waited:
            waited.add(task)
            await met.wait()
        return snap

    managers = [make_engine(database_url, pool_size=5) for _ in range(2)]
    try:
        await migrate.upgrade(managers[0])
        makers = [make_sessionmaker(engine, Hub()) for engine in managers]
        lows = await _seed(makers[0])
        monkeypatch.setattr(passes, "load_snapshot", meeting)
        over: list[str] = []
        done = asyncio.Event()
        watcher = asyncio.create_task(watch_allocations(makers[0], over, done))
        configs = [SchedulerConfig(Policy.FIFO, Strategy.BINPACK),
                   SchedulerConfig(Policy.BACKFILL, Strategy.SPREAD)]
        await asyncio.gather(*(_scheduler(m, c, done) for m, c in zip(makers, configs,
                                                                       strict=True)),
                             _nodes(makers[0], done))
        await watcher
        assert over == []
        async with makers[0]() as db:
            rows = (await db.scalars(select(SessionRow))).all()
            by_class = {r.id: r for r in rows}
            winners = [r for r in rows if r.priority_class == "high"]
            assert sorted(r.status for r in winners) == ["RUNNING"] * WINNERS
            victims = [r for r in rows if r.priority_class == "normal"]
            assert len(victims) == len(lows)  # none lost
            assert sum(r.preemptions for r in victims) == WINNERS  # one victim per winner
            assert {r.status for r in victims} <= {"PENDING", "RUNNING"}, \
                sorted(r.status for r in victims)
            assert all(r.held_node_id is None for r in rows)  # no capacity held for nothing
            held = dict((await db.execute(
                select(AllocationRow.session_id, func.count())
                .where(AllocationRow.released_at.is_(None))
                .group_by(AllocationRow.session_id))).all())
            assert all(n == 1 for n in held.values())  # placed once
            assert set(held) == {r.id for r in rows if r.status in HOLDING}
            for device in await db.scalars(select(DeviceRow)):
                assert 0 <= device.used <= device.capacity, device.uuid
            assert len(by_class) == len(lows) + WINNERS
    finally:
        for engine in managers:
            await engine.dispose()


async def _scheduler(
    maker: async_sessionmaker[AsyncSession], config: SchedulerConfig, done: asyncio.Event
) -> None:
    hub = Hub()
    while not done.is_set():
        await run_pass(maker, config, hub)
        await asyncio.sleep(0.01)


async def _nodes(maker: async_sessionmaker[AsyncSession], done: asyncio.Event) -> None:
    """The nodes' agents: a stopping session's container is gone (its end reported), a placed
    one runs. Done once every winner runs and nothing is stopping."""
    for _turn in range(2000):
        async with maker() as db:
            rows = (await db.scalars(select(SessionRow).where(SessionRow.status.in_(
                ["SCHEDULED", "TERMINATING"])))).all()
            for row in rows:
                try:
                    if row.status == "TERMINATING":
                        await report_state(db, str(row.node_id), row.id,
                                           StateReport(status=SessionStatus.TERMINATED))
                    else:
                        await transition(db, row, SessionStatus.RUNNING, "running")
                        await db.commit()
                except (StaleStatus, NotFound):
                    await db.rollback()
            running = await db.scalar(select(func.count()).select_from(SessionRow).where(
                SessionRow.priority_class == "high", SessionRow.status == "RUNNING"))
            busy = await db.scalar(select(func.count()).select_from(SessionRow).where(
                SessionRow.status.in_(["SCHEDULED", "TERMINATING"])))
        if running == WINNERS and not busy:
            break
        await asyncio.sleep(0.02)
    done.set()


async def _seed(maker: async_sessionmaker[AsyncSession]) -> list[str]:
    """Classes, nodes, a low-class batch session RUNNING on every GPU (placed by a pass), and
    the high-class ones waiting."""
    now = datetime.now(UTC)
    async with maker() as db:
        db.add_all([PriorityClassRow(name="normal", rank=0, min_runtime_s=0, grace_s=5,
                                     preempt_interactive=False, is_default=True),
                    PriorityClassRow(name="high", rank=10, min_runtime_s=0, grace_s=5,
                                     preempt_interactive=False, is_default=False)])
        user = UserRow(username="racer", password_hash="-", role="user", is_active=True)
        db.add(user)
        await db.flush()
        for n in range(NODES):
            node = NodeRow(name=f"n{n}", credential_hash=f"{n:064d}", status="ALIVE",
                           device_capacity=1000, cpu=64_000, mem=512 * GiB, images=[],
                           usage={}, last_heartbeat_at=now)
            db.add(node)
            await db.flush()
            for i in range(DEVICES):
                db.add(DeviceRow(node_id=node.id, index=i, uuid=f"GPU-{n}-{i}", model="Mock",
                                 mem=40 * GiB, sms=100, capacity=1000, used=0))
        await db.execute(insert(SessionRow), [_session(user.id, f"low{i}", "normal", now, i)
                                              for i in range(NODES * DEVICES)])
        await db.commit()
        uid = user.id
    await run_pass(maker, SchedulerConfig(), Hub())
    async with maker() as db:
        lows = (await db.scalars(select(SessionRow))).all()
        for row in lows:
            await transition(db, row, SessionStatus.RUNNING, "running")
        await db.execute(insert(SessionRow), [
            _session(uid, f"high{i}", "high", now, 100 + i) for i in range(WINNERS)])
        await db.commit()
        return [r.id for r in lows]


def _session(owner: str, name: str, klass: str, now: datetime, i: int) -> dict[str, object]:
    return {"name": name, "owner_id": owner, "image": "python:3.11", "type": "batch",
            "env": {}, "priority": 0, "pool": "default", "gpu": 1000, "cpu": 1000, "mem": GiB,
            "status": "PENDING", "status_reason": "", "priority_class": klass,
            "created_at": now + timedelta(milliseconds=i), "updated_at": now}
