"""Usage history on the real database: samples in (each reading once, at the manager's minute),
minutes closed into points and accounting in one go, packing and rollups that keep every sum,
and a manager restart that neither loses nor double-counts anything."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from sqlalchemy import func, select

from gpuslice.common.schemas.agents import SessionUsage
from gpuslice.manager.app import create_app
from gpuslice.manager.db.models import (
    UsageDailyRow,
    UsageHistoryRow,
    UsageMinuteRow,
    UsageSeriesRow,
)
from gpuslice.manager.services.monitoring import history, maintenance, samples
from gpuslice.manager.services.monitoring.codec import Point
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import AgentFactory, Client, create

GiB = 1024**3
GAP = 30_000
# Two hours ago, on the hour: every minute it spans is in the past for the history readers.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)


def sample(at_s: float, interval_s: float | None, *, cpu: int | None = 500, mem: int = GiB,
           gpu_mem: int | None = 2 * GiB, util: int | None = 50) -> dict[str, Any]:
    return {"at_ms": round(at_s * 1000), "cpu": cpu, "mem": mem,
            "interval_ms": None if interval_s is None else round(interval_s * 1000),
            "gpus": [{"uuid": "GPU-mock-0", "mem_used": gpu_mem, "utilization": util}]}


async def put(app: FastAPI, node_id: str, session_id: str, at: float, body: dict[str, Any],
              gap: int = GAP) -> int:
    async with app.state.sessionmaker() as db:
        return await samples.store(db, node_id, [SessionUsage(session_id=session_id, **body)],
                                   T0 + timedelta(seconds=at), gap)


async def running_session(admin: Client, make_agent: AgentFactory) -> tuple[str, str]:
    agent = await make_agent("node-h")
    [s] = await create(admin, resources={"gpu": 0.5, "cpu": 1, "mem": "2g"})
    for _ in range(100):
        if (await admin.get(f"/api/v1/sessions/{s['id']}")).json()["status"] == "RUNNING":
            return agent.node_id, s["id"]
        await agent.heartbeat()
    raise AssertionError("the session did not start")


async def series_of(app: FastAPI, session_id: str) -> UsageSeriesRow:
    async with app.state.sessionmaker() as db:
        found = await db.scalar(
            select(UsageSeriesRow).where(UsageSeriesRow.session_id == session_id)
        )
        assert found is not None
        return found


async def history_sum(app: FastAPI, series: UsageSeriesRow) -> dict[str, int]:
    """The sums of every point of the series' history, exactly (read as the API reads it:
    steady against a maintenance pass running meanwhile)."""
    keys = [f.name for f in fields(Point) if f.name != "slot" and not f.name.endswith("_max")]
    async with app.state.sessionmaker() as db:
        async def read() -> list[history.Timed]:
            fresh = await db.get(UsageSeriesRow, series.id, populate_existing=True)
            assert fresh is not None
            return await history.points(db, fresh, 0, 2**40)

        found = await history.steady(db, samples.SERIES.c.id == series.id, read)
    return {k: sum(getattr(t.point, k) for t in found) for k in keys}


async def accounted(app: FastAPI, series: UsageSeriesRow) -> dict[str, int]:
    """The accounting rows of the series, its minutes not yet packed and its open minute: what
    totals are made of."""
    async with app.state.sessionmaker() as db:
        async def read() -> dict[str, int]:
            fresh = await db.get(UsageSeriesRow, series.id, populate_existing=True)
            assert fresh is not None
            sums = dict.fromkeys(history.SUMS, 0)
            for table in (UsageDailyRow, UsageMinuteRow):  # packed, and not yet packed
                row = (await db.execute(
                    select(*(func.sum(getattr(table, k)) for k in history.SUMS))
                    .where(table.series_id == series.id))).one()
                sums = {k: sums[k] + int(v or 0) for k, v in zip(history.SUMS, row,
                                                                  strict=True)}
            opened = samples.open_point(fresh)
            if opened is not None:
                sums = {k: v + getattr(opened[1], k) for k, v in sums.items()}
            return sums

        return await history.steady(db, samples.SERIES.c.id == series.id, read)


async def test_samples_are_kept_once_per_reading_and_closed_by_minute(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    node_id, sid = await running_session(admin, make_agent)
    assert await put(app, node_id, sid, 0, sample(1, None, cpu=None)) == 1  # first: covers 0
    assert await put(app, node_id, sid, 10, sample(11, 10)) == 1
    assert await put(app, node_id, sid, 10.5, sample(11, 10)) == 0  # the same reading again
    assert await put(app, node_id, sid, 50, sample(46, 40)) == 1  # capped at the gap: 30 s
    # Arrives at 1:05 for 0:55..1:05: 5 s go to the minute it closes, 5 s to the new one.
    assert await put(app, node_id, sid, 65, sample(56, 10, util=10)) == 1
    # The node's clock set back: taken (its figures are news), never overlapping in time.
    assert await put(app, node_id, sid, 66, sample(54, 0, util=10)) == 1
    assert await put(app, node_id, "not-a-session", 66, sample(60, 1)) == 0

    series = await series_of(app, sid)
    async with app.state.sessionmaker() as db:
        [closed] = (await db.scalars(select(UsageMinuteRow))).all()
    first_minute = int(T0.timestamp()) // 60
    assert (closed.minute, closed.covered_ms, closed.cpu_ms) == (first_minute, 45_000, 45_000)
    assert closed.fgpu_sum == 500 * 45_000  # 0.5 fGPU for 45 s, in milli-fGPU × ms
    # A closed minute keeps its averages (rounded down) times their time: 45.5 % -> 45 %.
    assert closed.gpu_util_sum == 45 * 45_000
    assert (series.minute, series.covered_ms, series.gpu_util_sum) == (
        first_minute + 1, 5_000, 10 * 5_000)
    assert series.gpus == [{"uuid": "GPU-mock-0", "mem_used": 2 * GiB, "utilization": 10}]
    assert await history_sum(app, series) == await accounted(app, series)


async def test_unknown_gpu_figures_are_not_counted_as_zero(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    node_id, sid = await running_session(admin, make_agent)
    await put(app, node_id, sid, 0, sample(0, None))
    await put(app, node_id, sid, 10, sample(10, 10, util=None))  # not measured
    await put(app, node_id, sid, 20, sample(20, 10, gpu_mem=None, util=None))
    await put(app, node_id, sid, 30, {**sample(30, 10), "gpus": None})  # an agent that cannot
    await put(app, node_id, sid, 40, sample(40, 10, util=90))
    series = await series_of(app, sid)
    assert (series.covered_ms, series.gpu_ms, series.gpu_util_sum) == (40_000, 10_000, 900_000)
    async with app.state.sessionmaker() as db:
        [point] = await history.points(db, series, 0, 2**40)
    assert history.public_point(0, point.point).gpu_util == 90  # the mean of what was measured


async def test_packing_and_rollups_keep_every_sum(
    app: FastAPI, admin: Client, make_agent: AgentFactory, settings: ManagerSettings
) -> None:
    node_id, sid = await running_session(admin, make_agent)
    await put(app, node_id, sid, 0, sample(0, None))
    for i in range(1, 200):  # 10-second samples for 33 minutes, then the session stops
        await put(app, node_id, sid, i * 10, sample(i * 10, 10, util=i % 100, cpu=i))
    series = await series_of(app, sid)
    before = await history_sum(app, series)
    assert before == await accounted(app, series)
    retention = maintenance.Retention(30, 400)
    stats = await maintenance.maintain(app.state.sessionmaker, retention, T0 + timedelta(hours=1))
    assert (stats.closed, stats.packed, stats.rolled) == (1, 34, 0)  # closed its last minute
    series = await series_of(app, sid)
    assert series.minute is None and await history_sum(app, series) == before
    async with app.state.sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(UsageMinuteRow)) == 0
        [row] = (await db.scalars(select(UsageHistoryRow))).all()
    assert (row.step, row.start) == (60, int(T0.timestamp()))

    later = T0 + timedelta(days=31)  # past the minute retention: hour points
    stats = await maintenance.maintain(app.state.sessionmaker, retention, later)
    assert stats.rolled == 1
    assert await history_sum(app, series) == before == await accounted(app, series)
    async with app.state.sessionmaker() as db:
        [day] = (await db.scalars(select(UsageHistoryRow))).all()
        points = await history.points(db, series, 0, 2**40)
    assert (day.step, day.start) == (3600, int(T0.timestamp()) // 86400 * 86400)
    assert len(points) == 1 and points[0].point.covered_ms == before["covered_ms"]
    dropped = await maintenance.maintain(app.state.sessionmaker, retention,
                                         T0 + timedelta(days=402))
    assert dropped.dropped == 1  # past the hour retention; accounting stays
    assert (await accounted(app, series))["fgpu_sum"] == before["fgpu_sum"]


async def test_history_and_accounting_survive_a_restart_without_double_counting(
    app: FastAPI, admin: Client, make_agent: AgentFactory, settings: ManagerSettings
) -> None:
    node_id, sid = await running_session(admin, make_agent)
    await put(app, node_id, sid, 0, sample(0, None))
    for i in range(1, 8):
        await put(app, node_id, sid, i * 20, sample(i * 20, 20))
    series = await series_of(app, sid)
    before = await history_sum(app, series)

    again = create_app(settings)  # a second manager on the same database, then the first gone
    async with again.router.lifespan_context(again):
        # The agent sends its last reading again (its answer was lost), then goes on.
        assert await put(again, node_id, sid, 150, sample(140, 20)) == 0
        assert await put(again, node_id, sid, 170, sample(170, 30)) == 1
        series = await series_of(again, sid)
        after = await history_sum(again, series)
        assert after == await accounted(again, series)
    assert after["covered_ms"] == before["covered_ms"] + 30_000
    assert after["fgpu_sum"] == before["fgpu_sum"] + 500 * 30_000
