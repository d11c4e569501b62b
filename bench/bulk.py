"""Scheduling throughput through the database: 5,000 PENDING sessions onto 500 nodes.

The manager runs in this process (its real lifespan: migrations, the scheduling loop) and is
called through httpx's ASGI transport. 500 simulated nodes register and heartbeat through the
agent API (8 GPUs of 80 GiB, 2 fGPU each; 64 cores, 512 GiB) and each keeps a long-poll of its
assignments open, as agents do (answered at every placement on it; no containers). 5,000
PENDING sessions (0.5 fGPU, 1 CPU, 1 GiB; 8,000 slots) are written at once, as after an outage
or a large sweep, and the clock runs from the scheduler's wake-up to the last one SCHEDULED.
Then the guarded allocation is checked: every session placed exactly once, and every counter
(devices' used fGPU, nodes' cpu and memory) equal to the sum of what is allocated on it.

    python bench/bulk.py                      # SQLite in a temporary directory
    python bench/bulk.py --pg postgresql://user:pw@host/db   # a fresh database on that server
    python bench/bulk.py --short              # the test suite's run: 200 sessions, 20 nodes

Last line: ``backend=<sqlite|postgresql> scheduled_per_s=<n> seconds=<s> sessions=<n>
nodes=<n> consistent=<yes|no> failed_calls=<n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, insert, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._local import login_admin, parse_args, scratch_database  # noqa: E402
from bench.api import IMAGE  # noqa: E402
from gpuslice.agent.loops import LONG_POLL_S  # noqa: E402
from gpuslice.manager.app import create_app  # noqa: E402
from gpuslice.manager.db.base import new_id  # noqa: E402
from gpuslice.manager.db.models import (  # noqa: E402
    AllocationRow,
    DeviceRow,
    NodeRow,
    SessionRow,
    StatusHistoryRow,
    UserRow,
)
from gpuslice.manager.settings import load_settings  # noqa: E402

GiB = 1024**3
FAILED: list[int] = []  # the agents' calls that failed (status), retried as agents do


async def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as tmp:
        async with scratch_database(args.pg, Path(tmp)) as url:
            settings = load_settings(
                data_dir=Path(tmp), database={"url": url},
                sessions={"allowed_images": [IMAGE]}, nodes={"fgpu_per_gpu": "2"},
            )
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # a 500
                async with httpx.AsyncClient(transport=transport, base_url="http://m",
                                             timeout=120) as client:
                    await login_admin(client, Path(tmp))
                    stop = asyncio.Event()
                    polls = await _join_nodes(client, args.nodes, stop)
                    seconds = await _schedule_all(app, args.sessions)
                    stop.set()
                    app.state.hub.close()  # parked long-polls answer now, as at shutdown
                    await asyncio.gather(*polls, return_exceptions=True)
                    consistent = await _consistent(app, args.sessions)
    backend = "postgresql" if args.pg else "sqlite"
    print(f"{args.sessions} sessions scheduled onto {args.nodes} nodes in {seconds:.2f} s; "
          f"allocation consistent: {consistent}")
    print(f"backend={backend} scheduled_per_s={args.sessions / seconds:.0f} "
          f"seconds={seconds:.2f} sessions={args.sessions} nodes={args.nodes} "
          f"consistent={'yes' if consistent else 'no'} failed_calls={len(FAILED)}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", help="PostgreSQL server URL; a fresh database is made on it")
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    return parse_args(parser, {"sessions": 200, "nodes": 20})


async def _join_nodes(
    client: httpx.AsyncClient, count: int, stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """Register ``count`` nodes, each with its first heartbeat, then its agent's loop."""
    async def join(i: int) -> dict[str, str]:
        name = f"bulk-{i:04d}"
        token = (await client.post("/api/v1/join-tokens", json={"name": name})).json()["token"]
        r = await client.post("/api/v1/agents/register", json={"join_token": token, "name": name})
        r.raise_for_status()
        auth = {"Authorization": f"Bearer {r.json()['credential']}", "X-Bench-Node": name}
        r = await client.post("/api/v1/agents/me/heartbeat", headers=auth, json={
            "cpu": 64_000, "mem": 512 * GiB, "devices": _devices(auth), "images": [IMAGE]})
        r.raise_for_status()
        return auth

    agents = []
    for start in range(0, count, 50):
        for auth in await asyncio.gather(*(join(i) for i in range(start, min(count, start + 50)))):
            agents.append(asyncio.create_task(_long_poll(client, auth, stop)))
    return agents


async def _long_poll(client: httpx.AsyncClient, auth: dict[str, str],
                     stop: asyncio.Event) -> None:
    """What an agent does: heartbeat (every 5 s) and take its assignments as soon as they
    change, each long-poll waiting as long as the agent's do."""
    beats = asyncio.create_task(_heartbeats(client, auth, stop))
    version = None
    while not stop.is_set():
        params: dict[str, Any] = {"wait": LONG_POLL_S}
        if version is not None:
            params["since"] = version
        r = await client.get("/api/v1/agents/me/assignments", headers=auth, params=params)
        if r.status_code != 200:  # as an agent does: again a little later
            FAILED.append(r.status_code)
            await asyncio.sleep(1.0)
            continue
        version = r.json()["version"]
    await beats


async def _heartbeats(client: httpx.AsyncClient, auth: dict[str, str],
                      stop: asyncio.Event) -> None:
    body = {"cpu": 64_000, "mem": 512 * GiB, "images": [IMAGE], "devices": _devices(auth)}
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 5.0)
        r = await client.post("/api/v1/agents/me/heartbeat", headers=auth, json=body)
        if r.status_code != 200:  # counted; the next one comes at the interval, as an agent's
            FAILED.append(r.status_code)


def _devices(auth: dict[str, str]) -> list[dict[str, Any]]:
    name = auth["X-Bench-Node"]
    return [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "Bench 80GB", "mem": 80 * GiB,
             "sms": 132} for i in range(8)]


async def _schedule_all(app: Any, total: int) -> float:
    """Write ``total`` PENDING sessions at once, wake the scheduler, wait until none is left."""
    async with app.state.sessionmaker() as db:
        owner = await db.scalar(select(UserRow.id))
        now = datetime.now(UTC)
        rows = [
            {"id": new_id(), "name": f"bulk-{i}", "owner_id": owner, "image": IMAGE,
             "type": "batch", "command": ["true"], "env": {}, "priority": 0, "gpu": 500,
             "cpu": 1000, "mem": GiB, "status": "PENDING", "status_reason": "queued",
             "created_at": now + timedelta(microseconds=i), "updated_at": now}
            for i in range(total)
        ]
        for start in range(0, total, 1000):
            await db.execute(insert(SessionRow), rows[start:start + 1000])
        await db.commit()
    started = time.perf_counter()
    app.state.hub.scheduler.set()
    while True:
        async with app.state.sessionmaker() as db:
            left = await db.scalar(select(func.count()).select_from(SessionRow).where(
                SessionRow.status == "PENDING"))
        if not left:
            break
        await asyncio.sleep(0.02)
    async with app.state.sessionmaker() as db:
        last = await db.scalar(select(func.max(StatusHistoryRow.at)).where(
            StatusHistoryRow.to_status == "SCHEDULED"))
    assert last is not None
    # the last placement's own time, not when this loop happened to look
    return max(time.perf_counter() - started - (datetime.now(UTC) - last).total_seconds(), 1e-3)


async def _consistent(app: Any, total: int) -> bool:
    """Every session placed once; every counter equal to the sum of what is allocated on it."""
    async with app.state.sessionmaker() as db:
        scheduled = await db.scalar(select(func.count()).select_from(SessionRow).where(
            SessionRow.status == "SCHEDULED"))
        per_session = (await db.execute(
            select(AllocationRow.session_id, func.count()).group_by(AllocationRow.session_id)
        )).all()
        device_sums = dict((await db.execute(
            select(AllocationRow.device_id, func.sum(AllocationRow.gpu))
            .where(AllocationRow.released_at.is_(None)).group_by(AllocationRow.device_id)
        )).all())
        devices = (await db.execute(select(DeviceRow.id, DeviceRow.used))).all()
        node_sums = {n: (c, m) for n, c, m in (await db.execute(
            select(SessionRow.node_id, func.sum(SessionRow.cpu), func.sum(SessionRow.mem))
            .where(SessionRow.status == "SCHEDULED").group_by(SessionRow.node_id)
        )).all()}
        nodes = (await db.execute(select(NodeRow.id, NodeRow.cpu_used, NodeRow.mem_used))).all()
        statuses = dict((await db.execute(
            select(SessionRow.status, func.count()).group_by(SessionRow.status))).tuples().all())
        reasons = (await db.execute(
            select(SessionRow.status_reason, func.count())
            .where(SessionRow.status != "SCHEDULED").group_by(SessionRow.status_reason)
        )).all()
    once = len(per_session) == total and all(n == 1 for _, n in per_session)
    devices_ok = all(used == (device_sums.get(d) or 0) for d, used in devices)
    nodes_ok = all((c, m) == node_sums.get(n, (0, 0)) for n, c, m in nodes)
    if not (scheduled == total and once and devices_ok and nodes_ok):
        print(f"inconsistent: {scheduled} of {total} SCHEDULED, placed once: {once}, "
              f"device counters right: {devices_ok}, node counters right: {nodes_ok}; "
              f"by status: {statuses}; not scheduled because: {reasons}")
    return scheduled == total and once and devices_ok and nodes_ok


if __name__ == "__main__":
    asyncio.run(main())
