"""Batch throughput through the whole platform, next to the same containers run plainly.

Platform: `gpuslice up` (manager + local agent, real Docker, one mock 8 GiB GPU split in 8 fGPU)
in a subprocess; N batch sessions running ``true`` (1 fGPU, 0.1 CPU, 64 MiB each, so 8 run at
once) are created through the SDK, and the clock stops when the last one is TERMINATED (from
the event stream). Then every session must be TERMINATED with result SUCCESS, no session
container of the node may be left behind, and once the platform stops no container of the
node at all (its idle network sandboxes go with it). Floor: the same N containers (same image,
command, user, limits, init, on the agent's fenced session network) created, started, waited
for and removed through the Engine API (aiodocker), 8 at a time, measured in the same run just
before and again just after, their mean the floor (a machine that drifts during the run then
moves both sides alike); and the same on Docker's default bridge (no isolation: ``bridge_*``),
last.

    python bench/throughput.py [--sessions 200] [--image gpuslice/base:<version>] [--short]

Last line: ``platform_per_s=<n> floor_per_s=<n> ratio=<x> floor_before_per_s=<n>
floor_after_per_s=<n> bridge_per_s=<n> bridge_ratio=<x> lost=<n> left=<n> left_after_stop=<n>``
(ratio: the platform's rate over the floor's). Sessions join warm network sandboxes
(``agent/isolation/sandboxes.py``) where the floor's containers are wired into the network one
by one: the platform can beat its floor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiodocker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._local import forget_node, node_containers, parse_args  # noqa: E402
from bench.start_latency import start_platform  # noqa: E402
from gpuslice.client import ApiError, Client  # noqa: E402
from gpuslice.common.images import DEFAULT_SESSION_IMAGE  # noqa: E402

SLOTS = 8  # 1 fGPU sessions on one GPU of 8 fGPU
FINAL = {"TERMINATED", "ERROR", "CANCELLED"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--image", default=DEFAULT_SESSION_IMAGE)
    # 10: more than the GPU's 8 slots, so that some wait for others' end
    args = parse_args(parser, {"sessions": 10})
    node = f"bench-{uuid.uuid4().hex[:6]}"
    network = f"gpuslice-{node}"  # the agent's fenced session network
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_platform(
            Path(tmp), _free_port(), node, fgpu_per_gpu=str(SLOTS),
            settings={"GPUSLICE_SESSIONS__MAX_PENDING": str(args.sessions + 10),
                      "GPUSLICE_SESSIONS__MAX_COUNT": "100"},
        )
        try:
            before_s = asyncio.run(plain_batch(args.image, args.sessions, network))
            print(f"floor:    {args.sessions} containers in {before_s:.1f} s "
                  f"({args.sessions / before_s:.2f}/s), on the session network", flush=True)
            platform_s, lost = platform_batch(client, args.image, args.sessions)
            print(f"platform: {args.sessions} sessions in {platform_s:.1f} s "
                  f"({args.sessions / platform_s:.2f}/s)", flush=True)
            left = _left_behind(node)
            after_s = asyncio.run(plain_batch(args.image, args.sessions, network))
            print(f"floor:    {args.sessions} containers in {after_s:.1f} s "
                  f"({args.sessions / after_s:.2f}/s), again after", flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            stopped_left = len(node_containers(node))  # its idle network sandboxes go too
            forget_node(node)
    bridge_s = asyncio.run(plain_batch(args.image, args.sessions, None))
    print(f"bridge:   {args.sessions} containers in {bridge_s:.1f} s "
          f"({args.sessions / bridge_s:.2f}/s), on Docker's default bridge (no isolation)")
    print(f"lost {lost}, session containers left {left}, containers left once it stopped "
          f"{stopped_left}")
    rate, floor = args.sessions / platform_s, args.sessions / ((before_s + after_s) / 2)
    bridge = args.sessions / bridge_s
    print(f"platform_per_s={rate:.2f} floor_per_s={floor:.2f} ratio={rate / floor:.2f} "
          f"floor_before_per_s={args.sessions / before_s:.2f} "
          f"floor_after_per_s={args.sessions / after_s:.2f} "
          f"bridge_per_s={bridge:.2f} bridge_ratio={rate / bridge:.2f} lost={lost} left={left} "
          f"left_after_stop={stopped_left}")


def platform_batch(client: Client, image: str, n: int) -> tuple[float, int]:
    """Seconds from the first create to the last session's end; sessions not SUCCESS."""
    ended: dict[str, float] = {}
    done = threading.Event()
    wanted: set[str] = set()
    threading.Thread(target=_follow, args=(Client(client.url, client.token), ended, wanted, done),
                     daemon=True).start()
    time.sleep(1.0)  # the stream is open before the first create
    started = time.perf_counter()
    for first in range(0, n, 100):
        count = min(100, n - first)
        made = client.create_sessions(image=image, type="batch", command=["true"], gpu="1",
                                      cpu="0.1", mem="64m", count=count, name=f"tp{first}")
        wanted.update(s.id for s in made)
    if not done.wait(timeout=30 + n * 2):
        raise SystemExit(f"only {len(wanted & ended.keys())} of {n} sessions ended in time")
    elapsed = max(ended[sid] for sid in wanted) - started
    sessions = client.list_all_sessions()
    results = {s.id: (s.status.value, s.result.value if s.result else None)
               for s in sessions if s.id in wanted}
    lost = sum(1 for sid in wanted if results.get(sid) != ("TERMINATED", "SUCCESS"))
    return elapsed, lost


def _follow(client: Client, ended: dict[str, float], wanted: set[str],
            done: threading.Event) -> None:
    with contextlib.suppress(ApiError):  # the platform stops at the end
        for change in client.events():
            if change.status.value in FINAL:
                ended[change.session_id] = time.perf_counter()
                if wanted and wanted <= ended.keys():
                    done.set()


async def plain_batch(image: str, n: int, network: str | None) -> float:
    """The floor: n containers through the Engine API, SLOTS at a time, on ``network`` (the
    sessions' one: isolation is part of what a session is) or Docker's default bridge."""
    host: dict[str, object] = {
        "NanoCpus": 100_000_000, "Memory": 64 * 2**20, "MemorySwap": 64 * 2**20, "Init": True,
        "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
    }
    if network is not None:
        host["NetworkMode"] = network
    config = {"Image": image, "Cmd": ["true"], "User": "1000:1000",
              "Labels": {"gpuslice-bench": "throughput"}, "HostConfig": host}
    slots = asyncio.Semaphore(SLOTS)
    async with aiodocker.Docker() as docker:
        await docker.version()

        async def one() -> None:
            async with slots:
                container = await docker.containers.create(
                    config, name=f"bench-tp-{uuid.uuid4().hex[:10]}"
                )
                await container.start()
                await container.wait()
                await container.delete(v=True)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - started


def _left_behind(node: str) -> int:
    deadline = time.monotonic() + 10  # the last container is removed just after its report
    while True:
        left = node_containers(node, sessions_only=True)
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    main()
