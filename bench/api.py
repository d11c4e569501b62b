"""Manager API latency: create → SCHEDULED, and a page of 100 among many sessions.

    python bench/api.py                      # SQLite in a temporary directory
    python bench/api.py --pg postgresql://user:pw@host/db   # a fresh database on that server
    python bench/api.py --short              # the test suite's run: a few samples of each

The app runs in this process (its real lifespan: migrations, scheduling loop) and is called
through httpx's ASGI transport, so the figures are the manager's own, without network hops.
create → SCHEDULED is measured from just before the POST to the SCHEDULED row's timestamp in the
status history. Pages are listed unfiltered, by status (a tenth of the sessions) and by owner
(half), each walked page after page with the page's ``next`` (so deep pages are measured too).
Last line: ``create_to_scheduled_ms_p50=<ms> list_page_ms_p99=<ms>
list_status_ms_p99=<ms> list_owner_ms_p99=<ms>``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _local import login_admin, parse_args, scratch_database
from sqlalchemy import insert, select

from gpuslice.manager.app import create_app
from gpuslice.manager.db.models import SessionRow, UserRow
from gpuslice.manager.settings import load_settings

GiB = 1024**3
IMAGE = "python:3.11"


async def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as tmp:
        async with scratch_database(args.pg, Path(tmp)) as url:
            settings = load_settings(
                data_dir=Path(tmp), database={"url": url},
                sessions={"allowed_images": [IMAGE]},
            )
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://m") as client:
                    await login_admin(client, Path(tmp))
                    await _add_node(client)
                    create_ms = await _create_to_scheduled(client, args.creates)
                    owner = await _fill(app, args.sessions)
                    lists = {
                        "list_page_ms": await _list_pages(client, args.lists, {}),
                        "list_status_ms": await _list_pages(client, args.lists,
                                                            {"status": "ERROR"}),
                        "list_owner_ms": await _list_pages(client, args.lists,
                                                           {"owner": owner}),
                    }
    backend = "postgresql" if args.pg else "sqlite"
    print(f"backend={backend} creates={len(create_ms)} sessions_listed_from={args.sessions}")
    _report("create_to_scheduled_ms", create_ms)
    for name, values in lists.items():
        _report(name, values)
    p50 = statistics.median(create_ms)
    print(f"create_to_scheduled_ms_p50={p50:.2f} "
          + " ".join(f"{name.replace('_ms', '')}_ms_p99={_pct(values, 99):.2f}"
                     for name, values in lists.items()))


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", help="PostgreSQL server URL; a fresh database is made on it")
    parser.add_argument("--creates", type=int, default=200, help="create samples")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions in the database")
    parser.add_argument("--lists", type=int, default=300, help="list samples")
    return parse_args(parser, {"creates": 10, "sessions": 500, "lists": 10})


async def _add_node(client: httpx.AsyncClient) -> None:
    """A node with room for every create sample (one heartbeat; no agent needed to schedule)."""
    join = (await client.post("/api/v1/join-tokens", json={"name": "bench"})).json()["token"]
    r = await client.post("/api/v1/agents/register", json={"join_token": join, "name": "bench"})
    node_auth = {"Authorization": f"Bearer {r.json()['credential']}"}
    devices = [
        {"index": i, "uuid": f"GPU-bench-{i}", "model": "Bench", "mem": 80 * GiB, "sms": 132}
        for i in range(64)
    ]
    r = await client.post(
        "/api/v1/agents/me/heartbeat", headers=node_auth,
        json={"cpu": 10_000_000, "mem": 100_000 * GiB, "devices": devices, "images": [IMAGE]},
    )
    r.raise_for_status()


async def _create_to_scheduled(client: httpx.AsyncClient, samples: int) -> list[float]:
    latencies = []
    for _ in range(samples):
        started = datetime.now(UTC)
        r = await client.post(
            "/api/v1/sessions", json={"image": IMAGE, "resources": {"gpu": 0.1, "mem": "1g"}}
        )
        r.raise_for_status()
        session_id = r.json()[0]["id"]
        at = await _scheduled_at(client, session_id)
        latencies.append((at - started).total_seconds() * 1000)
    return latencies


async def _scheduled_at(client: httpx.AsyncClient, session_id: str) -> datetime:
    deadline = time.monotonic() + 10
    # The row's own time is read, so when and how often this asks changes no figure, except
    # that each read runs in this process's loop (the manager's) and its database threads:
    # a read at once would run beside the pass it waits for, and slow it.
    await asyncio.sleep(0.05)
    while time.monotonic() < deadline:
        body = (await client.get(f"/api/v1/sessions/{session_id}")).json()
        for change in body["history"]:
            if change["status"] == "SCHEDULED":
                return datetime.fromisoformat(change["at"])
        await asyncio.sleep(0.02)
    raise RuntimeError(f"session {session_id} was not scheduled within 10 s")


async def _fill(app: Any, total: int) -> str:
    """Top the sessions table up to ``total`` rows (ended sessions, as after months of use),
    a tenth of them ERROR, every other one another user's; that user's name."""
    async with app.state.sessionmaker() as db:
        admin = await db.scalar(select(UserRow.id))
        other = UserRow(username="bench-user", password_hash="-", role="user", is_active=True)
        db.add(other)
        await db.flush()
        have = len((await db.scalars(select(SessionRow.id))).all())
        base = datetime.now(UTC) - timedelta(days=30)
        rows = [
            {
                "name": f"old-{i}", "owner_id": other.id if i % 2 else admin, "image": IMAGE,
                "type": "batch", "command": ["python", "train.py"], "env": {"SEED": str(i)},
                "priority": 0, "gpu": 500, "cpu": 1000, "mem": GiB,
                "status": "ERROR" if i % 10 == 3 else "TERMINATED",
                "status_reason": "exited with code 0", "result": "SUCCESS", "exit_code": 0,
                "created_at": base + timedelta(seconds=i), "updated_at": base,
            }
            for i in range(max(total - have, 0))
        ]
        for start in range(0, len(rows), 1000):
            await db.execute(insert(SessionRow), rows[start : start + 1000])
        await db.commit()
    return "bench-user"


async def _list_pages(
    client: httpx.AsyncClient, samples: int, filters: dict[str, str]
) -> list[float]:
    """Pages walked as a client walks the listing (each page's ``next``), deeper and deeper,
    from the top again at its end."""
    latencies = []
    position: dict[str, str] = {}
    for _ in range(samples):
        started = time.perf_counter()
        r = await client.get("/api/v1/sessions", params={"limit": 100, **filters, **position})
        latencies.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
        page = r.json()
        assert page["items"]
        position = {"after": page["next"]} if page["next"] else {}
    return latencies


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def _report(name: str, values: list[float]) -> None:
    print(
        f"{name}: n={len(values)} p50={statistics.median(values):.2f} "
        f"p90={_pct(values, 90):.2f} p99={_pct(values, 99):.2f} max={max(values):.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
