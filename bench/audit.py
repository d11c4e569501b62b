"""The audit log's cost: create → SCHEDULED with the audit log on and off, side by side, and
a filtered read of the log (one user, a time window) among many rows.

    python bench/audit.py                      # SQLite in a temporary directory, 1M rows
    python bench/audit.py --pg postgresql://user:pw@host/db   # a fresh database on that server
    python bench/audit.py --short              # the test suite's run: a few samples, 20k rows

Two managers run in this process (their real lifespans, scheduling loops included), each on a
database of its own, called through httpx's ASGI transport; one has the audit log taken out (its
middleware removed: no request gets a context, so no row is written). Samples alternate between
the two, so load on the machine falls on both alike. ``create_ratio`` is the p50 of the POST
with the log over the p50 without; ``scheduled_ratio`` the same for create → SCHEDULED. Then the
log is filled to ``--rows`` rows (``--users`` actors over 400 days) and ``GET /api/v1/audit?user=
&since=&until=`` is timed. Last line: ``create_ratio=<x> scheduled_ratio=<x>
create_ms_p50=<ms> create_off_ms_p50=<ms> audit_query_ms_p99=<ms> rows=<n> rows_written=<n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _local import login_admin, parse_args, scratch_database
from sqlalchemy import func, insert, select

from gpuslice.manager.app import create_app
from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.services.audit.middleware import AuditMiddleware
from gpuslice.manager.settings import load_settings

GiB = 1024**3
IMAGE = "python:3.11"
# The filled rows stand as sealed ones (their positions far past the live chain): the sealer
# has months of rows behind it, not a million to catch up with while the queries run.
FILLED_POS = 10**12


async def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            on = await stack.enter_async_context(_manager(args.pg, Path(tmp) / "on", True))
            off = await stack.enter_async_context(_manager(args.pg, Path(tmp) / "off", False))
            timings: dict[str, list[float]] = {"on": [], "off": [], "on_s": [], "off_s": []}
            for n in range(args.creates):  # each first in turn: neither pays for going first
                pair = (("on", on), ("off", off))
                for name, (_app, client) in pair if n % 2 else pair[::-1]:
                    post_ms, scheduled_ms = await _create(client)
                    timings[name].append(post_ms)
                    timings[f"{name}_s"].append(scheduled_ms)
            app, client = on
            written = await _count(app)
            await _fill(app, args.rows, args.users)
            query_ms = await _queries(client, args.queries, args.users)
    p50 = {k: statistics.median(v) for k, v in timings.items()}
    print(f"backend={'postgresql' if args.pg else 'sqlite'} creates={args.creates} "
          f"rows={args.rows} users={args.users} queries={len(query_ms)}")
    print(f"create_ratio={p50['on'] / p50['off']:.3f} "
          f"scheduled_ratio={p50['on_s'] / p50['off_s']:.3f} "
          f"create_ms_p50={p50['on']:.2f} create_off_ms_p50={p50['off']:.2f} "
          f"scheduled_ms_p50={p50['on_s']:.2f} scheduled_off_ms_p50={p50['off_s']:.2f} "
          f"audit_query_ms_p99={_pct(query_ms, 99):.2f} rows={args.rows} "
          f"rows_written={written}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", help="PostgreSQL server URL; fresh databases are made on it")
    parser.add_argument("--creates", type=int, default=200, help="create samples, each way")
    parser.add_argument("--rows", type=int, default=1_000_000, help="audit rows to query among")
    parser.add_argument("--users", type=int, default=1000, help="actors the rows are spread on")
    parser.add_argument("--queries", type=int, default=300, help="query samples")
    return parse_args(parser, {"creates": 10, "rows": 20_000, "queries": 20})


@asynccontextmanager
async def _manager(pg: str | None, data_dir: Path,
                   audited: bool) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    data_dir.mkdir()
    async with scratch_database(pg, data_dir) as url:
        settings = load_settings(data_dir=data_dir, database={"url": url},
                                 sessions={"allowed_images": [IMAGE]})
        app = create_app(settings)
        if not audited:
            app.user_middleware = [m for m in app.user_middleware if m.cls is not AuditMiddleware]
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://m") as client:
                await login_admin(client, data_dir)
                online = asyncio.Event()
                beat = asyncio.create_task(_add_node(client, online))
                await online.wait()
                try:
                    yield app, client
                finally:
                    beat.cancel()


async def _add_node(client: httpx.AsyncClient, online: asyncio.Event) -> None:
    """A node with room for every create sample, kept online by a heartbeat every 5 s (no
    agent needed to schedule); runs until cancelled."""
    join = (await client.post("/api/v1/join-tokens", json={"name": "bench"})).json()["token"]
    r = await client.post("/api/v1/agents/register", json={"join_token": join, "name": "bench"})
    node_auth = {"Authorization": f"Bearer {r.json()['credential']}"}
    devices = [{"index": i, "uuid": f"GPU-bench-{i}", "model": "Bench", "mem": 80 * GiB,
                "sms": 132} for i in range(64)]
    while True:
        r = await client.post(
            "/api/v1/agents/me/heartbeat", headers=node_auth,
            json={"cpu": 10_000_000, "mem": 100_000 * GiB, "devices": devices,
                  "images": [IMAGE]})
        r.raise_for_status()
        online.set()
        await asyncio.sleep(5)


async def _create(client: httpx.AsyncClient) -> tuple[float, float]:
    """One create: the POST's own time, and create → SCHEDULED (the history row's time)."""
    started, clock = datetime.now(UTC), time.perf_counter()
    r = await client.post("/api/v1/sessions",
                          json={"image": IMAGE, "resources": {"gpu": 0.01, "mem": "1g"}})
    post_ms = (time.perf_counter() - clock) * 1000
    r.raise_for_status()
    session_id = r.json()[0]["id"]
    deadline = time.monotonic() + 10
    await asyncio.sleep(0.05)  # not beside the pass it waits for (see bench/api.py)
    while time.monotonic() < deadline:
        body = (await client.get(f"/api/v1/sessions/{session_id}")).json()
        for change in body["history"]:
            if change["status"] == "SCHEDULED":
                at = datetime.fromisoformat(change["at"])
                return post_ms, (at - started).total_seconds() * 1000
        await asyncio.sleep(0.02)
    raise RuntimeError(f"session {session_id} was not scheduled within 10 s")


async def _count(app: Any) -> int:
    async with app.state.sessionmaker() as db:
        return int(await db.scalar(select(func.count()).select_from(AuditRow)) or 0)


async def _fill(app: Any, total: int, users: int) -> None:
    """``total`` rows, actors ``bench-<n>`` in turn, spread evenly over the last 400 days."""
    now = datetime.now(UTC)
    step = timedelta(days=400) / max(total, 1)
    async with app.state.sessionmaker() as db:
        for start in range(0, total, 5000):
            await db.execute(insert(AuditRow), [
                {"id": uuid.uuid4().hex, "at": now - step * i, "actor_type": "user",
                 "actor_id": f"bench-{i % users}", "actor_name": f"bench-{i % users}",
                 "via": "api_token", "action": "session.create", "outcome": "success",
                 "target_type": "session", "target_id": uuid.uuid4().hex,
                 "source_ip": "10.0.0.1", "request_id": uuid.uuid4().hex,
                 "seal_pos": FILLED_POS + i, "hash": "0" * 64}
                for i in range(start, min(start + 5000, total))])
            await db.commit()


async def _queries(client: httpx.AsyncClient, samples: int, users: int) -> list[float]:
    """One user's rows in a 30-day window somewhere in the 400 days, a page of 100."""
    latencies = []
    now = datetime.now(UTC)
    for n in range(samples):
        until = now - timedelta(days=(n * 37) % 370)
        params = {"user": f"bench-{(n * 7919) % users}", "limit": "100",
                  "since": (until - timedelta(days=30)).isoformat(), "until": until.isoformat()}
        started = time.perf_counter()
        r = await client.get("/api/v1/audit", params=params)
        latencies.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
        assert r.json()["items"], params  # each window holds some of the user's rows
    return latencies


def _pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


if __name__ == "__main__":
    asyncio.run(main())
