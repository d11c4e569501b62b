"""Session start latency through the whole platform, next to a plain container start.

Platform: `gpuslice up` (manager + local agent, real Docker, mock GPU) in a subprocess; for each
run the SDK creates a 0.5-fGPU session and the clock stops when the RUNNING status change
arrives on the event stream. Plain: the same image and command created and started through the
same Engine API (aiodocker), the clock stopping when start returns. Runs alternate between the
two so that both see the same machine load.

    python bench/start_latency.py [--runs 10] [--restarts 7] [--image gpuslice/base:<version>]
    python bench/start_latency.py --short    # the test suite's run: 2 runs, 1 restart

Then the queue restart: four sessions hold the whole GPU and a fifth waits; the clock runs from
the request destroying a holder to the waiting session's RUNNING event (its floor: the plain
start, so ``restart_over_plain_ms`` is what the platform adds on that path).

Beside the plain start on Docker's default bridge, the same on the agent's session network
(``fenced``): what wiring a container into a user-defined network costs (a veth pair, a bridge
port, Docker's embedded DNS set-up). Sessions skip it: each joins a warm network sandbox in
that network (``agent/isolation/sandboxes.py``), so the platform's start can beat the plain one.

Last line: ``platform_ms_p50=<ms> plain_ms_p50=<ms> ratio=<x> restart_ms_p50=<ms>
restart_over_plain_ms=<ms> fenced_ms_p50=<ms> ratio_fenced=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiodocker
from _local import forget_node, parse_args

from gpuslice.client import Client
from gpuslice.common.images import DEFAULT_SESSION_IMAGE

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


def start_platform(
    data_dir: Path, port: int, node: str, *, fgpu_per_gpu: str = "2",
    settings: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], Client]:
    """`gpuslice up` with one mock 8 GiB GPU; ``settings``: extra ``GPUSLICE_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["GPUSLICE_CLIENT_CONFIG"] = str(data_dir / "client.json")
    env.update(settings or {})
    proc = subprocess.Popen(
        [GPUSLICE, "up", "--data-dir", str(data_dir), "--port", str(port), "--node-name", node,
         "--mock-gpus", "1x8GiB", "--fgpu-per-gpu", fgpu_per_gpu],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        if f"agent {node}: joined" in line:
            break
        if time.monotonic() > deadline:
            raise SystemExit("gpuslice up did not come up in time")
    else:
        raise SystemExit(f"gpuslice up exited early ({proc.wait()})")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    token = __import__("json").loads((data_dir / "client.json").read_text())["token"]
    return proc, Client(f"http://127.0.0.1:{port}", token)


def platform_run(client: Client, events: queue.Queue[tuple[str, str, float]], i: int) -> float:
    started = time.perf_counter()
    [session] = client.create_sessions(image=DEFAULT_SESSION_IMAGE, gpu="0.5", cpu="0.25",
                                       mem="128m", name=f"bench-{i}")
    while True:
        sid, status, at = events.get(timeout=60)
        if sid == session.id and status in ("RUNNING", "ERROR"):
            break
    if status != "RUNNING":
        raise SystemExit(f"session {session.name} failed: {client.get_session(session.id)}")
    elapsed = at - started
    client.destroy_sessions([session.id])
    client.wait(session.id, {"TERMINATED"}, timeout=60)
    return elapsed


async def plain_run(image: str, network: str | None = None) -> float:
    """Create + start of a plain container; ``network``: on that one (the agent's fenced
    session network: Docker's embedded DNS is set up in every container of a user-defined
    network, ~50 ms of a start here) instead of Docker's default bridge."""
    host: dict[str, object] = {
        "NanoCpus": 250_000_000, "Memory": 128 * 2**20, "Init": True,
        "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
    }
    if network is not None:
        host["NetworkMode"] = network
    config = {"Image": image, "Cmd": ["sleep", "infinity"], "User": "1000:1000",
              "HostConfig": host}
    async with aiodocker.Docker() as docker:
        await docker.version()  # connect first: the clock measures the container, not the socket
        started = time.perf_counter()
        container = await docker.containers.create(
            config, name=f"bench-plain-{uuid.uuid4().hex[:8]}"
        )
        await container.start()
        elapsed = time.perf_counter() - started
        await container.delete(force=True)
    return elapsed


def queue_restarts(
    client: Client, events: queue.Queue[tuple[str, str, float]], runs: int, image: str
) -> tuple[list[float], dict[str, list[float]]]:
    """Capacity full (4 sessions of 0.5 fGPU on 2 fGPU) and one session waiting: destroy a
    holder; seconds from the destroy request to the waiting session's RUNNING event, and where
    they went (``STEPS``, from the status events as the stream delivered them)."""
    holders = [_started(client, events, image, f"hold-{i}") for i in range(4)]
    restarts: list[float] = []
    steps: dict[str, list[float]] = {name: [] for name, _, _ in STEPS}
    try:
        for i in range(runs):
            [waiting] = client.create_sessions(image=image, gpu="0.5", cpu="0.25", mem="128m",
                                               name=f"queued-{i}")
            time.sleep(0.3)  # it is PENDING, behind the full GPU
            victim = holders.pop(0)
            seen: dict[tuple[str, str], float] = {}
            started = time.perf_counter()
            seen[(victim, "destroy")] = started
            client.destroy_sessions([victim])
            restarts.append(_await_status(events, waiting.id, "RUNNING", seen) - started)
            ids = {"victim": victim, "waiting": waiting.id}
            for name, (who, was), (whom, then) in STEPS:
                first, second = (ids[who], was), (ids[whom], then)
                if first in seen and second in seen:
                    steps[name].append(seen[second] - seen[first])
            holders.append(waiting.id)
            print(f"restart {i + 1:2d}: {restarts[-1] * 1000:7.1f} ms", flush=True)
    finally:
        client.destroy_sessions(holders)
        for sid in holders:
            client.wait(sid, {"TERMINATED"}, timeout=60)
    return restarts, steps


# The queue restart's steps: (name, from, to), each a (session, status event) pair.
STEPS = [
    ("stop", ("victim", "destroy"), ("victim", "TERMINATED")),
    ("place", ("victim", "TERMINATED"), ("waiting", "SCHEDULED")),
    ("deliver", ("waiting", "SCHEDULED"), ("waiting", "PREPARING")),
    ("start", ("waiting", "PREPARING"), ("waiting", "RUNNING")),
]


def _started(client: Client, events: queue.Queue[tuple[str, str, float]], image: str,
             name: str) -> str:
    [session] = client.create_sessions(image=image, gpu="0.5", cpu="0.25", mem="128m",
                                       name=name)
    _await_status(events, session.id, "RUNNING")
    return session.id


def _await_status(events: queue.Queue[tuple[str, str, float]], session_id: str,
                  wanted: str, seen: dict[tuple[str, str], float] | None = None) -> float:
    while True:
        sid, status, at = events.get(timeout=60)
        if seen is not None:
            seen.setdefault((sid, status), at)
        if sid == session_id and status in (wanted, "ERROR"):
            if status != wanted:
                raise SystemExit(f"session {session_id} failed")
            return at


def follow(client: Client, events: queue.Queue[tuple[str, str, float]]) -> None:
    for change in client.events():
        events.put((change.session_id, change.status.value, time.perf_counter()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=7, help="queue restarts to time")
    parser.add_argument("--image", default=DEFAULT_SESSION_IMAGE)
    args = parse_args(parser, {"runs": 2, "restarts": 1})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    node = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_platform(Path(tmp), port, node)
        events: queue.Queue[tuple[str, str, float]] = queue.Queue()
        threading.Thread(target=follow, args=(Client(client.url, client.token), events),
                         daemon=True).start()
        time.sleep(1.0)  # the stream is open before the first create
        platform_ms, plain_ms, fenced_ms = [], [], []
        network = f"gpuslice-{node}"  # the agent's session network
        try:
            asyncio.run(plain_run(args.image))  # warm every path once
            asyncio.run(plain_run(args.image, network))
            platform_run(client, events, 0)
            for i in range(1, args.runs + 1):
                platform_ms.append(platform_run(client, events, i) * 1000)
                plain_ms.append(asyncio.run(plain_run(args.image)) * 1000)
                fenced_ms.append(asyncio.run(plain_run(args.image, network)) * 1000)
                print(f"run {i:2d}: platform {platform_ms[-1]:7.1f} ms   "
                      f"plain {plain_ms[-1]:7.1f} ms   on the session network "
                      f"{fenced_ms[-1]:7.1f} ms", flush=True)
            restarts, steps = queue_restarts(client, events, args.restarts, args.image)
            restart_ms = [t * 1000 for t in restarts]
            plain_ms += [asyncio.run(plain_run(args.image)) * 1000 for _ in range(3)]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            forget_node(node)
    p50, q50 = statistics.median(platform_ms), statistics.median(plain_ms)
    print(f"platform: median {p50:.1f} ms, max {max(platform_ms):.1f} ms "
          f"(create request -> RUNNING event)")
    print(f"plain:    median {q50:.1f} ms, max {max(plain_ms):.1f} ms (create + start)")
    f50 = statistics.median(fenced_ms)
    print(f"fenced:   median {f50:.1f} ms, max {max(fenced_ms):.1f} ms (create + start on the "
          "session network)")
    r50 = statistics.median(restart_ms)
    print(f"restart:  median {r50:.1f} ms, max {max(restart_ms):.1f} ms (destroy request -> "
          "the waiting session's RUNNING event)")
    print("restart steps (median ms): " + "  ".join(
        f"{name} {statistics.median(times) * 1000:.1f}" for name, times in steps.items() if times))
    print(f"platform_ms_p50={p50:.1f} plain_ms_p50={q50:.1f} ratio={p50 / q50:.2f} "
          f"restart_ms_p50={r50:.1f} restart_over_plain_ms={r50 - q50:.1f} "
          f"fenced_ms_p50={f50:.1f} ratio_fenced={p50 / f50:.2f}")


if __name__ == "__main__":
    main()
