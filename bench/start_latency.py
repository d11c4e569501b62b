"""Session start latency through the whole platform, next to a plain container start.

Platform: `gpuslice up` (manager + local agent, real Docker, mock GPU) in a subprocess; for each
run the SDK creates a 0.5-fGPU session and the clock stops when the RUNNING status change
arrives on the event stream. Plain: the same image and command created and started through the
same Engine API (aiodocker), the clock stopping when start returns. Runs alternate between the
two so that both see the same machine load.

    python bench/start_latency.py [--runs 10] [--image gpuslice/base:<version>]

Last line: ``platform_ms_p50=<ms> plain_ms_p50=<ms> ratio=<x>``.
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


async def plain_run(image: str) -> float:
    config = {
        "Image": image, "Cmd": ["sleep", "infinity"], "User": "1000:1000",
        "HostConfig": {"NanoCpus": 250_000_000, "Memory": 128 * 2**20, "Init": True,
                       "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"]},
    }
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


def follow(client: Client, events: queue.Queue[tuple[str, str, float]]) -> None:
    for change in client.events():
        events.put((change.session_id, change.status.value, time.perf_counter()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--image", default=DEFAULT_SESSION_IMAGE)
    args = parser.parse_args()
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
        platform_ms, plain_ms = [], []
        try:
            asyncio.run(plain_run(args.image))  # warm both paths once
            platform_run(client, events, 0)
            for i in range(1, args.runs + 1):
                platform_ms.append(platform_run(client, events, i) * 1000)
                plain_ms.append(asyncio.run(plain_run(args.image)) * 1000)
                print(f"run {i:2d}: platform {platform_ms[-1]:7.1f} ms   "
                      f"plain {plain_ms[-1]:7.1f} ms")
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    p50, q50 = statistics.median(platform_ms), statistics.median(plain_ms)
    print(f"platform: median {p50:.1f} ms, max {max(platform_ms):.1f} ms "
          f"(create request -> RUNNING event)")
    print(f"plain:    median {q50:.1f} ms, max {max(plain_ms):.1f} ms (create + start)")
    print(f"platform_ms_p50={p50:.1f} plain_ms_p50={q50:.1f} ratio={p50 / q50:.2f}")


if __name__ == "__main__":
    main()
