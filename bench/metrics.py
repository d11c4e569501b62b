"""Monitoring at scale: 1,000 RUNNING sessions on 100 simulated nodes (8 GPUs each).

    python bench/metrics.py                  # SQLite in a temporary directory
    python bench/metrics.py --pg postgresql://user:pw@host/db   # a fresh database on that server
    python bench/metrics.py --short          # the test suite's run: 120 sessions, a day

The sessions are created as a user would, 100 per request (the most a request may ask for):
the bench's manager allows that many, and all of them PENDING at once (``sessions.max_count``,
``sessions.max_pending``).

1. ``/metrics`` as Prometheus gets it (ASGI, an admin's token): render time, beside the floor of
   an authenticated call that reads one row (``GET /api/v1/auth/me``) in the same run.
2. Storing one heartbeat's samples (10 sessions, 8 device readings), the manager's clock
   stepping 5 s per round across several minutes so that minutes close as in production:
   p99 per heartbeat, beside the floor of one single-row write transaction per node.
3. History for 1,000 sessions over 30 days at the 1-minute resolution (packed hour rows, as
   the maintenance loop leaves them, plus accounting rows): bytes on disk, beside the same
   points uncompressed (8-byte integers). Row contents come from a pool of generated hours
   (idle, steady, bursty sessions), so sizes follow their distribution.

Wall times are printed beside this process's CPU time (all threads): on a machine shared
with other work, time spent waiting for a core is not the manager's. Last line:
``metrics_render_ms_p50=… store_ms_p99=… history_30d_mib=… …``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, insert, select, text, update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _local import login_admin, parse_args, scratch_database  # noqa: E402
from api import _pct, _report  # noqa: E402  (the same bench helpers)

from gpuslice.common.limits import CREATE_COUNT_MAX as MAX_COUNT  # noqa: E402
from gpuslice.common.schemas.agents import SessionUsage  # noqa: E402
from gpuslice.manager.app import create_app  # noqa: E402
from gpuslice.manager.db.models import (  # noqa: E402
    AllocationRow,
    NodeRow,
    SessionRow,
    UsageDailyRow,
    UsageHistoryRow,
    UsageSeriesRow,
)
from gpuslice.manager.services.monitoring import samples  # noqa: E402
from gpuslice.manager.services.monitoring.codec import (  # noqa: E402
    WIDTH,
    Point,
    encode,
    quantized,
)
from gpuslice.manager.settings import load_settings  # noqa: E402

GiB = 1024**3
IMAGE = "python:3.11"
PER_NODE, GPUS = 10, 8
# CPU time of this process (all its threads: aiosqlite works in one) beside the wall time:
# on a machine shared with other work, time spent waiting for a core is not the manager's.
STORE_CPU_MS: list[float] = []
RENDER_CPU_MS: list[float] = []


async def main() -> None:
    args = _parse()
    sessions = args.nodes * PER_NODE
    with tempfile.TemporaryDirectory() as tmp:
        async with scratch_database(args.pg, Path(tmp)) as url:
            settings = load_settings(data_dir=Path(tmp), database={"url": url},
                                     sessions={"allowed_images": [IMAGE],
                                               "max_count": MAX_COUNT,
                                               "max_pending": sessions},
                                     # the bench drives heartbeats itself, slower than agents
                                     nodes={"node_timeout": 3600},
                                     scheduler={"strategy": "spread"},  # 10 per node
                                     monitoring={"maintenance_interval": 3600,
                                                 "reclaim_interval": 3600})
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://m",
                                             timeout=60) as client:
                    await login_admin(client, Path(tmp))
                    nodes = await _cluster(client, app, args.nodes)
                    store, floor = await _store_heartbeats(app, nodes, args.rounds)
                    render, me = await _scrape(client, args.scrapes, sessions)
                    size, raw = await _history_size(app, args.pg is not None, Path(tmp),
                                                    args.days)
    backend = "postgresql" if args.pg else "sqlite"
    print(f"backend={backend} nodes={args.nodes} sessions={sessions} gpus={args.nodes * GPUS}")
    _report("metrics_render_ms", render)
    _report("metrics_render_cpu_ms", RENDER_CPU_MS)
    _report("auth_me_floor_ms", me)
    _report("store_heartbeat_ms", store)
    _report("store_heartbeat_cpu_ms", STORE_CPU_MS)
    _report("write_floor_ms", floor)
    print(f"history: {args.days} days x {sessions} sessions = {size / 2**20:.1f} MiB "
          f"on disk, {raw / 2**20:.1f} MiB as plain 8-byte integers "
          f"({raw / max(size, 1):.1f}x), {size / (sessions * args.days):.0f} bytes "
          "per session-day")
    print(f"metrics_render_ms_p50={statistics.median(render):.1f} "
          f"metrics_render_ms_p99={_pct(render, 99):.1f} "
          f"render_vs_floor={statistics.median(render) / statistics.median(me):.1f} "
          f"metrics_render_cpu_ms_p50={statistics.median(RENDER_CPU_MS):.1f} "
          f"store_ms_p99={_pct(store, 99):.2f} store_ms_p50={statistics.median(store):.2f} "
          f"store_cpu_ms_p99={_pct(STORE_CPU_MS, 99):.2f} "
          f"store_vs_floor_p99={_pct(store, 99) / _pct(floor, 99):.1f} "
          f"history_{args.days}d_mib={size / 2**20:.1f} "
          f"history_bytes_per_session_day={size / (sessions * args.days):.0f}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", help="PostgreSQL server URL; a fresh database is made on it")
    parser.add_argument("--rounds", type=int, default=48, help="heartbeat rounds, 5 s apart")
    parser.add_argument("--scrapes", type=int, default=30, help="/metrics samples")
    parser.add_argument("--days", type=int, default=30, help="days of history to size")
    parser.add_argument("--nodes", type=int, default=100,
                        help=f"simulated nodes, {PER_NODE} sessions on each")
    return parse_args(parser, {"rounds": 3, "scrapes": 3, "days": 1, "nodes": 12})


async def _cluster(
    client: httpx.AsyncClient, app: Any, count: int
) -> list[tuple[str, list[tuple[str, str]]]]:
    """``count`` nodes of 8 GPUs, 10 RUNNING sessions each:
    ``[(node, [(session, its GPU)])]``."""
    credentials = []
    for n in range(count):
        token = (await client.post("/api/v1/join-tokens", json={"name": f"n{n}"})).json()
        r = await client.post("/api/v1/agents/register",
                              json={"join_token": token["token"], "name": f"node-{n:03d}"})
        auth = {"Authorization": f"Bearer {r.json()['credential']}"}
        devices = [{"index": i, "uuid": f"GPU-{n:03d}-{i}", "model": "Bench H100",
                    "mem": 80 * GiB, "sms": 132} for i in range(GPUS)]
        r = await client.post("/api/v1/agents/me/heartbeat", headers=auth, json={
            "cpu": 128_000, "mem": 1024 * GiB, "devices": devices, "images": [IMAGE]})
        r.raise_for_status()
        credentials.append(auth)
    for first in range(0, count * PER_NODE, MAX_COUNT):
        r = await client.post("/api/v1/sessions", json={
            "image": IMAGE, "count": min(MAX_COUNT, count * PER_NODE - first),
            "resources": {"gpu": 0.5, "cpu": 2, "mem": "8g"}})
        r.raise_for_status()
    placed = await _placed(app, count * PER_NODE)
    ids = dict(zip(await _node_ids(app), credentials, strict=True))
    for node_id, sessions in placed:
        auth = ids[node_id]
        await asyncio.gather(*(client.post(f"/api/v1/agents/me/sessions/{sid}/state",
                                           headers=auth, json={"status": "RUNNING"})
                               for sid, _uuid in sessions))
    return placed


async def _node_ids(app: Any) -> list[str]:
    async with app.state.sessionmaker() as db:
        return list((await db.scalars(select(NodeRow.id).order_by(NodeRow.name))).all())


async def _placed(app: Any, sessions: int) -> list[tuple[str, list[tuple[str, str]]]]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        async with app.state.sessionmaker() as db:
            rows = (await db.execute(
                select(SessionRow.node_id, SessionRow.id, AllocationRow.device_uuid)
                .join(AllocationRow, AllocationRow.session_id == SessionRow.id)
                .where(SessionRow.node_id.is_not(None)))).all()
        if len(rows) == sessions:
            by_node: dict[str, list[tuple[str, str]]] = {}
            for node_id, sid, uuid in rows:
                by_node.setdefault(node_id, []).append((sid, uuid))
            return sorted(by_node.items())
        await asyncio.sleep(0.5)
    raise RuntimeError("the sessions were not all placed within 5 minutes")


async def _store_heartbeats(
    app: Any, nodes: list[tuple[str, list[tuple[str, str]]]], rounds: int
) -> tuple[list[float], list[float]]:
    """Per heartbeat: storing its samples, and the floor (one single-row write + commit)."""
    rng = random.Random(12)
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    stored, floor = [], []
    clock_ms = 1_000_000
    for r in range(rounds):
        now = start + timedelta(seconds=5 * r)
        clock_ms += 5000
        for node_id, sessions in nodes:
            usage = [SessionUsage(
                session_id=sid, cpu=rng.randrange(2000), mem=rng.randrange(8 * GiB),
                at_ms=clock_ms, interval_ms=5000 if r else None,
                gpus=[{"uuid": uuid, "mem_used": rng.randrange(40 * GiB),
                       "utilization": rng.randrange(101)}],
            ) for sid, uuid in sessions]
            async with app.state.sessionmaker() as db:
                began, cpu = time.perf_counter(), time.process_time()
                await samples.store(db, node_id, usage, now, 30_000)
                stored.append((time.perf_counter() - began) * 1000)
                STORE_CPU_MS.append((time.process_time() - cpu) * 1000)
                began = time.perf_counter()
                await db.execute(update(NodeRow).where(NodeRow.id == node_id)
                                 .values(last_heartbeat_at=datetime.now(UTC)))
                await db.commit()
                floor.append((time.perf_counter() - began) * 1000)
    return stored, floor


async def _scrape(
    client: httpx.AsyncClient, count: int, sessions: int
) -> tuple[list[float], list[float]]:
    render, me = [], []
    for _ in range(count):
        began, cpu = time.perf_counter(), time.process_time()
        r = await client.get("/metrics")
        render.append((time.perf_counter() - began) * 1000)
        RENDER_CPU_MS.append((time.process_time() - cpu) * 1000)
        r.raise_for_status()
        found = r.text.count("gpuslice_session_gpu_utilization{")
        assert found == sessions, (found, r.text[:3000])
        began = time.perf_counter()
        (await client.get("/api/v1/auth/me")).raise_for_status()
        me.append((time.perf_counter() - began) * 1000)
    return render, me


async def _history_size(app: Any, pg: bool, tmp: Path, days: int) -> tuple[int, int]:
    """Bytes that ``days`` of 1-minute history of every session take, and their plain size."""
    async with app.state.sessionmaker() as db:
        series = list((await db.scalars(select(UsageSeriesRow.id))).all())
        owner = await db.scalar(select(UsageSeriesRow.owner_id))
        await db.execute(text("DELETE FROM usage_history"))
        await db.execute(text("DELETE FROM usage_daily"))
        await db.commit()
        before = await _bytes(db, pg, tmp)
        pool = _hour_pool(random.Random(30))
        first_hour = int(datetime.now(UTC).timestamp()) // 3600 * 3600 - days * 86400
        batch: list[dict[str, Any]] = []
        for i, series_id in enumerate(series):
            for h in range(days * 24):
                data = pool[(i * 7919 + h) % len(pool)]
                batch.append({"series_id": series_id, "step": 60,
                              "start": first_hour + h * 3600, "points": data})
                if len(batch) == 5000:  # committed by batches: the manager's loops go on
                    await db.execute(insert(UsageHistoryRow), batch)
                    await db.commit()
                    batch = []
        if batch:
            await db.execute(insert(UsageHistoryRow), batch)
        await db.execute(insert(UsageDailyRow), [
            {"series_id": s, "day": first_hour // 86400 + d, "owner_id": owner,
             "covered_ms": 86_400_000, "fgpu_sum": 500 * 86_400_000, "cpu_ms": 86_400_000,
             "cpu_sum": 10**11, "mem_sum": 10**15, "gpu_ms": 86_400_000,
             "gpu_mem_sum": 10**15, "gpu_util_sum": 4 * 10**9}
            for s in series for d in range(days)])
        await db.commit()
        rows = await db.scalar(select(func.count()).select_from(UsageHistoryRow))
        assert rows == len(series) * days * 24
        after = await _bytes(db, pg, tmp)
    raw = len(series) * days * 1440 * WIDTH * 8
    return after - before, raw


def _hour_pool(rng: random.Random, size: int = 3000) -> list[bytes]:
    """Packed hours of three kinds of sessions, as minutes close them (averages times the
    time): idle (a notebook nobody uses), steady training, bursty interactive work. Host
    memory drifts by up to 256 KiB a minute, its peak is within 1 MiB of the average."""
    pool = []
    for k in range(size):
        kind = k % 3
        points = []
        util = rng.randrange(60, 95)
        gpu_mem = rng.randrange(2, 30) * 2**20  # KiB
        host = rng.randrange(1, 16) * 2**20  # KiB
        for slot in range(60):
            host = max(2**18, host + rng.randrange(-256, 257))
            if kind == 0:
                cpu, u, g = rng.randrange(0, 10), 0, 0
            elif kind == 1:
                util = max(0, min(100, util + rng.randrange(-3, 4)))
                cpu, u, g = 950 + rng.randrange(100), util, gpu_mem
            else:
                burst = rng.random() < 0.2
                cpu = rng.randrange(50, 1500)
                u, g = (rng.randrange(40, 100) if burst else 0), gpu_mem
            points.append(quantized(Point(
                slot, 60_000, 500 * 60_000, 60_000, cpu * 60_000, host * 60_000,
                host + rng.randrange(1024), 60_000, g * 60_000, g, u * 60_000)))
        pool.append(encode(points))
    return pool


async def _bytes(db: Any, pg: bool, tmp: Path) -> int:
    if pg:
        tables = ("usage_history", "usage_daily", "usage_series", "usage_minutes")
        total = 0
        for table in tables:
            total += int(await db.scalar(text(f"SELECT pg_total_relation_size('{table}')")))
        return total
    await db.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    return (tmp / "bench.db").stat().st_size


if __name__ == "__main__":
    asyncio.run(main())
