"""One manager under 1,000 agents: heartbeat latency, the manager's CPU and memory, liveness.

A real manager (`gpuslice manager serve`, PostgreSQL: a fresh database on the server given)
runs in a subprocess. First the N simulated nodes join, ten at a time, as a fleet's agents come
up: each registers through the agent API (a join token each, as `gpuslice admin token create`
makes), sends its first heartbeat (8 GPUs, a few images: the full report, devices written) and
takes its first assignments (answered at once); the time this takes is printed (`join_s`).
Then, for the given time, each node does what a joined agent does: a heartbeat at the interval
the manager gives (5 s by default), and a long-poll of its assignments from the version it has,
asked again as soon as it answers. Heartbeats and long-polls start spread over their interval
and wait, as a fleet's agents (started at different times) are, and each agent keeps its own
beat (a heartbeat this process sends late does not move the next). Measured over that time:
each heartbeat sent in it, its round trip, the manager's CPU time (from /proc) and its largest
resident memory (sampled), and how many nodes the manager wrongly marked LOST. Before
measuring, this process freezes what its fleet holds out of its own garbage collector, whose
passes over a thousand agents (up to 250 ms) would otherwise be counted as the manager's
latency.

    python bench/agents.py [--agents 1000] [--seconds 120] [--pg postgresql+asyncpg://…]
    python bench/agents.py --short    # the test suite's run: 20 agents, 5 s, short settling

Last line: ``heartbeat_ms_p50=<ms> heartbeat_ms_p99=<ms> manager_cpu_cores=<x>
manager_rss_mb=<MB> lost_nodes=<n> failed_calls=<n> join_s=<s> agents=<n> seconds=<s>``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._local import parse_args  # noqa: E402
from bench.cli_start import CREDENTIALS_FILE, _clean_env  # noqa: E402
from bench.throughput import _free_port  # noqa: E402
from gpuslice.agent.loops import LONG_POLL_S  # noqa: E402

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
    parser.add_argument("--spread", type=float, default=max(LONG_POLL_S, 10.0),
                        help="seconds after the last join before measuring (heartbeats and "
                        "long-polls spread)")
    parser.add_argument("--drain", type=float, default=3.0,
                        help="seconds after this process's collector pass before measuring")
    # 5 s: at least the heartbeat interval, so that every agent's beat is measured once
    return parse_args(parser, {"agents": 20, "seconds": 5.0, "spread": 1.0, "drain": 0.5})


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
        connector = aiohttp.TCPConnector(limit=0)
        # aiohttp for the agents' own calls: httpx's pool costs grow with its connections,
        # and with 2,000 of them this process, not the manager, would set the pace.
        async with aiohttp.ClientSession(url, connector=connector) as agents:
            beats: list[float] = []
            measuring, stop = asyncio.Event(), asyncio.Event()
            tasks: list[asyncio.Task[None]] = []
            joined = time.monotonic()
            await _join(client, agents, args.agents, beats, measuring, stop, tasks)
            join_s = time.monotonic() - joined
            # The last to join have spread their heartbeats and long-polls meanwhile.
            await asyncio.sleep(args.spread)
            # This process plays a thousand agents: its own garbage collector walking them all
            # (a 200 ms pause now and then) would be measured as the manager's latency. What
            # the fleet holds from here on is kept out of the collector's passes.
            gc.collect()
            gc.freeze()
            # That pass (~0.3 s) held back every agent whose heartbeat fell due meanwhile:
            # they go all at once now. Such a burst is this process's doing, not a fleet's,
            # so measuring starts once it has drained and the heartbeats are spread again.
            await asyncio.sleep(args.drain)
            measuring.set()
            cpu_before, started = _cpu_seconds(pid), time.monotonic()
            rss = [_rss_mb(pid)]
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
            "failed_calls": len(FAILED), "join_s": f"{join_s:.1f}", "agents": args.agents,
            "seconds": f"{args.seconds:.0f}"}


async def _login(client: httpx.AsyncClient, tmp: Path) -> None:
    text_ = (tmp / "data" / CREDENTIALS_FILE).read_text()
    creds = dict(line.split(": ", 1) for line in text_.splitlines() if ": " in line)
    r = await client.post("/api/v1/auth/login", json=creds)
    r.raise_for_status()
    client.headers["Authorization"] = f"Bearer {r.json()['access_token']}"


@dataclass
class Node:
    index: int
    auth: dict[str, str]
    interval: float  # seconds between heartbeats, as the manager said at registration
    version: int  # of the assignments it has


async def _join(client: httpx.AsyncClient, agents: aiohttp.ClientSession, count: int,
                beats: list[float], measuring: asyncio.Event, stop: asyncio.Event,
                tasks: list[asyncio.Task[None]]) -> None:
    """Register ``count`` nodes, ten at a time; each sends its full first heartbeat, takes its
    first assignments, then goes on as an agent (its loop in ``tasks``)."""
    async def one(i: int) -> Node:
        for _attempt in range(5):
            try:
                return await join(i)
            except (httpx.TransportError, aiohttp.ClientError):  # the manager busy: once more
                await asyncio.sleep(1.0)
        return await join(i)

    async def join(i: int) -> Node:
        name = f"agent-{i:04d}"
        token = (await client.post("/api/v1/join-tokens", json={"name": name})).json()["token"]
        r = await client.post("/api/v1/agents/register", headers={"Authorization": ""},
                              json={"join_token": token, "name": name})
        r.raise_for_status()
        body = r.json()
        auth = {"Authorization": f"Bearer {body['credential']}"}
        async with agents.post("/api/v1/agents/me/heartbeat", headers=auth,
                               json=_heartbeat(i)) as answer:
            answer.raise_for_status()
        async with agents.get("/api/v1/agents/me/assignments", headers=auth) as answer:
            answer.raise_for_status()
            version = (await answer.json())["version"]
        node = Node(i, auth, body["heartbeat_interval_ms"] / 1000, version)
        tasks.append(asyncio.create_task(_agent(agents, node, beats, measuring, stop)))
        return node

    for start in range(0, count, 10):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 10))))


async def _agent(client: aiohttp.ClientSession, node: Node, beats: list[float],
                 measuring: asyncio.Event, stop: asyncio.Event) -> None:
    body = _heartbeat(node.index)
    polls = asyncio.create_task(_long_polls(client, node, stop))
    # A fleet's agents started at different times: their heartbeats are spread, and stay so.
    # Each agent keeps its own beat, on its own machine: one sent late because this process
    # was busy does not move its next. Otherwise the agents held back together would beat
    # together from then on, bursts that grow with every pause, which no fleet makes.
    due = time.perf_counter() + random.uniform(0, node.interval)
    try:
        while not stop.is_set():
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            due += node.interval
            started = time.perf_counter()
            # Counted only if sent once measuring began: one sent before would carry this
            # process's own pause (its collector's pass and freeze, just above) as latency.
            counted = measuring.is_set()
            try:
                async with client.post("/api/v1/agents/me/heartbeat", headers=node.auth,
                                       json=body) as r:
                    r.raise_for_status()
                    await r.read()
                if counted:
                    beats.append((time.perf_counter() - started) * 1000)
            except aiohttp.ClientError:  # counted, and the agent goes on (as a real one does)
                FAILED.append(time.perf_counter() - started)
    finally:
        polls.cancel()


async def _long_polls(client: aiohttp.ClientSession, node: Node, stop: asyncio.Event) -> None:
    version = node.version
    first = True
    while not stop.is_set():
        # Spread like the heartbeats: the first wait is cut short at a random point.
        wait = random.uniform(0, LONG_POLL_S) if first else LONG_POLL_S
        first = False
        try:
            async with client.get("/api/v1/agents/me/assignments", headers=node.auth,
                                  params={"since": version, "wait": f"{wait:.3f}"}) as r:
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
