"""One manager under 1,000 agents: heartbeat latency, the manager's CPU and memory, liveness.

A real manager (`gpuslice manager serve`, PostgreSQL: a fresh database on the server given)
runs in a subprocess. This process registers N simulated nodes through the agent API (a join
token each, as `gpuslice admin token create` makes), then each node does what an agent does for
the given time: a heartbeat at the interval the manager gives (5 s by default; 8 GPUs, a few
images, usage of two sessions) and a long-poll of its assignments, asked again as soon as it
answers. Heartbeats start spread over one interval, as real agents' do. Measured: each
heartbeat's round trip, the manager's CPU time over the run (from /proc) and its largest
resident memory (sampled), and how many nodes the manager wrongly marked LOST.

    python bench/agents.py [--agents 1000] [--seconds 120] [--pg postgresql+asyncpg://…]

Last line: ``heartbeat_ms_p50=<ms> heartbeat_ms_p99=<ms> manager_cpu_cores=<x>
manager_rss_mb=<MB> lost_nodes=<n> failed_calls=<n> agents=<n> seconds=<s>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_start import CREDENTIALS_FILE, _clean_env  # noqa: E402
from bench.throughput import _free_port  # noqa: E402

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
DEFAULT_PG = "postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:5432/gpuslice"
GiB = 1024**3
IMAGES = ["gpuslice/base:0.1.0", "gpuslice/scipy:1.5.2", "python:3.11"]
FAILED: list[float] = []  # calls that failed (refused, reset, 5xx)


def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory(prefix="gpuslice-agents-") as tmp:
        database = asyncio.run(_create_database(args.pg))
        try:
            proc, url = _start_manager(Path(tmp), database)
            try:
                figures = asyncio.run(_run(url, Path(tmp), proc.pid, args))
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
        finally:
            asyncio.run(_drop_database(args.pg, database))
    beats = figures.pop("beats")
    print(f"{args.agents} agents for {args.seconds} s: {len(beats)} heartbeats, "
          f"p50 {statistics.median(beats):.1f} ms, p99 {_pct(beats, 99):.1f} ms, "
          f"max {max(beats):.1f} ms")
    print(f"heartbeat_ms_p50={statistics.median(beats):.1f} "
          f"heartbeat_ms_p99={_pct(beats, 99):.1f} "
          + " ".join(f"{k}={v}" for k, v in figures.items()))


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--pg", default=DEFAULT_PG, help="a PostgreSQL server (superuser)")
    return parser.parse_args()


async def _create_database(server: str) -> str:
    name = f"gpuslice_agents_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(make_url(server).set(drivername="postgresql+asyncpg"),
                                isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()
    return make_url(server).set(drivername="postgresql+asyncpg", database=name).render_as_string(
        hide_password=False)


async def _drop_database(server: str, url: str) -> None:
    admin = create_async_engine(make_url(server).set(drivername="postgresql+asyncpg"),
                                isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(
            f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    await admin.dispose()


def _start_manager(tmp: Path, database: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = _clean_env(tmp) | {"GPUSLICE_DATA_DIR": str(tmp / "data"),
                             "GPUSLICE_DATABASE__URL": database}
    with (tmp / "manager.log").open("wb") as log:
        proc = subprocess.Popen(
            [GPUSLICE, "manager", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=log, stderr=log, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the manager exited ({proc.returncode}):\n"
                             + (tmp / "manager.log").read_text()[-2000:])
        try:
            httpx.get(f"{url}/api/v1/health/live", timeout=1.0).raise_for_status()
            if (tmp / "data" / CREDENTIALS_FILE).is_file():
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the manager did not start in 90 s")


async def _run(url: str, tmp: Path, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=3 * args.agents, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        await _login(client, tmp)
        nodes = await _register(client, args.agents)
        interval = nodes[0][1] / 1000
        beats: list[float] = []
        stop = asyncio.Event()
        # aiohttp for the agents' own calls: httpx's pool costs grow with its connections,
        # and with 2,000 of them this process, not the manager, would set the pace.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(url, connector=connector) as agents:
            cpu_before, started = _cpu_seconds(pid), time.monotonic()
            rss = [_rss_mb(pid)]
            tasks = [asyncio.create_task(_agent(agents, auth, interval, beats, stop, i))
                     for i, (auth, _ms) in enumerate(nodes)]
            while time.monotonic() - started < args.seconds:
                await asyncio.sleep(1.0)
                rss.append(_rss_mb(pid))
            cpu = (_cpu_seconds(pid) - cpu_before) / (time.monotonic() - started)
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        listed = (await client.get("/api/v1/nodes")).json()
    lost = sum(1 for n in listed if n["status"] != "ALIVE")
    return {"beats": beats, "manager_cpu_cores": f"{cpu:.2f}",
            "manager_rss_mb": f"{max(rss):.0f}", "lost_nodes": lost,
            "failed_calls": len(FAILED), "agents": args.agents,
            "seconds": f"{args.seconds:.0f}"}


async def _login(client: httpx.AsyncClient, tmp: Path) -> None:
    text_ = (tmp / "data" / CREDENTIALS_FILE).read_text()
    creds = dict(line.split(": ", 1) for line in text_.splitlines() if ": " in line)
    r = await client.post("/api/v1/auth/login", json=creds)
    r.raise_for_status()
    client.headers["Authorization"] = f"Bearer {r.json()['access_token']}"


async def _register(client: httpx.AsyncClient, count: int) -> list[tuple[dict[str, str], int]]:
    async def one(i: int) -> tuple[dict[str, str], int]:
        for _attempt in range(5):
            try:
                return await join(i)
            except httpx.TransportError:  # the manager busy with the others: once more
                await asyncio.sleep(1.0)
        return await join(i)

    async def join(i: int) -> tuple[dict[str, str], int]:
        name = f"agent-{i:04d}"
        token = (await client.post("/api/v1/join-tokens", json={"name": name})).json()["token"]
        r = await client.post("/api/v1/agents/register", headers={"Authorization": ""},
                              json={"join_token": token, "name": name})
        r.raise_for_status()
        body = r.json()
        return {"Authorization": f"Bearer {body['credential']}"}, body["heartbeat_interval_ms"]

    nodes = []
    for start in range(0, count, 10):
        nodes += await asyncio.gather(*(one(i) for i in range(start, min(count, start + 10))))
    return nodes


async def _agent(client: aiohttp.ClientSession, auth: dict[str, str], interval: float,
                 beats: list[float], stop: asyncio.Event, index: int) -> None:
    body = _heartbeat(index)
    await asyncio.sleep(random.uniform(0, interval))  # agents start at different times
    polls = asyncio.create_task(_long_polls(client, auth, stop))
    try:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                async with client.post("/api/v1/agents/me/heartbeat", headers=auth,
                                       json=body) as r:
                    r.raise_for_status()
                    await r.read()
                beats.append((time.perf_counter() - started) * 1000)
            except aiohttp.ClientError:  # counted, and the agent goes on (as a real one does)
                FAILED.append(time.perf_counter() - started)
            await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))
    finally:
        polls.cancel()


async def _long_polls(client: aiohttp.ClientSession, auth: dict[str, str],
                      stop: asyncio.Event) -> None:
    version = None
    while not stop.is_set():
        params: dict[str, Any] = {"wait": 25}
        if version is not None:
            params["since"] = version
        try:
            async with client.get("/api/v1/agents/me/assignments", headers=auth,
                                  params=params) as r:
                r.raise_for_status()
                version = (await r.json())["version"]
        except aiohttp.ClientError:
            FAILED.append(0.0)
            await asyncio.sleep(1.0)


def _heartbeat(index: int) -> dict[str, Any]:
    devices = [{"index": d, "uuid": f"GPU-{index:04d}-{d}", "model": "Bench 80GB",
                "mem": 80 * GiB, "sms": 132, "mem_used": 0, "utilization": 0}
               for d in range(8)]
    return {"cpu": 64_000, "mem": 512 * GiB, "devices": devices, "images": IMAGES,
            "running": [], "usage": []}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


if __name__ == "__main__":
    main()
