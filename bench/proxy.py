"""The app proxy next to the same app reached directly: latency of small requests, and a
100 MiB download's throughput and the manager's memory during it.

Platform: `gpuslice up` (manager + local agent in one process, real Docker, mock GPU) in a
subprocess. The app: ``tests/platform/echo_app.py`` (standard library HTTP/1.1 server with
keep-alive) in a session of a throwaway image built FROM the base image. Direct: the app at its
container's address, from this machine. Proxy: the app's own origin on the manager,
``echo--<session>.apps.localhost:<port>`` (asked at 127.0.0.1 with that ``Host``: Python does
not resolve ``*.localhost``), which reaches the app through the agent (under `gpuslice up`
its link is in memory, the agent running in the manager's process; remote agents dial a
WebSocket back). Both are asked by the same client (httpx, one kept-alive connection each),
in alternating blocks so that both see the same machine load. Memory: the RSS of the
`gpuslice up` process (manager and agent together: an upper bound for the manager), sampled
every 20 ms during the proxied download.

    python bench/proxy.py [--requests 1000] [--downloads 3] [--size-mib 100] [--short]

Floor: the least one Python hop costs here (``bench/_floors.py http``: uvicorn, httptools and
uvloop as the manager serves, aiohttp's client as the agent asks, and nothing else), asked in
the same blocks; ``floor_ratio`` is its median over direct's, the ratio no Python proxy on this
machine gets under.

Last line: ``small_p50_ms=… small_p50_direct_ms=… latency_ratio=… small_p50_floor_ms=…
floor_ratio=… small_p99_ms=… small_p99_direct_ms=… download_mib_s=… download_mib_s_direct=…
throughput_ratio=… rss_growth_mib=…``. Targets: latency_ratio ≤ 1.5, throughput_ratio ≥ 0.8,
rss_growth_mib < 50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiodocker
import httpx
from _floors import running
from _local import forget_node, free_port, parse_args

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.start_latency import start_platform  # noqa: E402
from gpuslice.agent.runtime.models import addresses_of, joined  # noqa: E402
from gpuslice.client import Client  # noqa: E402
from gpuslice.common.images import DEFAULT_SESSION_IMAGE  # noqa: E402
from tests.platform import app_image  # noqa: E402

MiB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="small requests each way")
    parser.add_argument("--downloads", type=int, default=3, help="downloads each way")
    parser.add_argument("--size-mib", type=int, default=100, help="download size")
    parser.add_argument("--image", default=DEFAULT_SESSION_IMAGE, help="base image")
    args = parse_args(parser, {"requests": 50, "downloads": 1, "size_mib": 8})
    tag = f"gpuslice-bench/apps:{uuid.uuid4().hex[:8]}"
    print(f"building {tag} from {args.image}", flush=True)
    app_image.build(tag, args.image)
    node = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_platform(Path(tmp), free_port(), node)
        try:
            run(client, proc.pid, tag, args)
        finally:
            proc.terminate()
            proc.wait(30)
            forget_node(node)
            app_image.remove(tag)


def run(client: Client, pid: int, tag: str, args: argparse.Namespace) -> None:
    session = client.create_sessions(image=tag, cpu=1, mem="512m", name="bench")[0]
    for _ in range(100):
        try:
            session = client.wait(session.id, {"RUNNING"}, timeout=120)
            break
        except Exception:
            time.sleep(0.2)  # the new image reaches the catalog with the next heartbeat
    client.start_app(session.id, "echo")
    direct = f"http://{asyncio.run(_address(session.id))}:{app_image.ECHO_PORT}"
    proxied = client.url
    port = client.url.rsplit(":", 1)[1]
    auth = {"Authorization": f"Bearer {client.token}",
            "Host": f"echo--{session.id}.apps.localhost:{port}"}
    with httpx.Client(timeout=60) as plain, httpx.Client(headers=auth, timeout=60) as via, \
            running("http", direct) as floor_port:
        floor = f"http://127.0.0.1:{floor_port}"
        small = {"direct": [], "proxy": [], "floor": []}  # type: dict[str, list[float]]
        blocks = 10
        for _ in range(blocks):
            small["direct"] += _latencies(plain, f"{direct}/small", args.requests // blocks)
            small["proxy"] += _latencies(via, f"{proxied}/small", args.requests // blocks)
            small["floor"] += _latencies(plain, f"{floor}/small", args.requests // blocks)
        size = args.size_mib * MiB
        rates = {"direct": [], "proxy": []}  # type: dict[str, list[float]]
        growth = []
        for _ in range(args.downloads):
            rates["direct"].append(_download(plain, f"{direct}/bytes?n={size}", size))
            with _RssWatch(pid) as watch:
                rates["proxy"].append(_download(via, f"{proxied}/bytes?n={size}", size))
            growth.append(watch.growth)
    figures = {
        "small_p50_ms": _ms(statistics.median(small["proxy"])),
        "small_p50_direct_ms": _ms(statistics.median(small["direct"])),
        "latency_ratio": round(statistics.median(small["proxy"])
                               / statistics.median(small["direct"]), 2),
        "small_p50_floor_ms": _ms(statistics.median(small["floor"])),
        "floor_ratio": round(statistics.median(small["floor"])
                             / statistics.median(small["direct"]), 2),
        "small_p99_ms": _ms(_p99(small["proxy"])),
        "small_p99_direct_ms": _ms(_p99(small["direct"])),
        "download_mib_s": round(statistics.median(rates["proxy"]), 1),
        "download_mib_s_direct": round(statistics.median(rates["direct"]), 1),
        "throughput_ratio": round(statistics.median(rates["proxy"])
                                  / statistics.median(rates["direct"]), 2),
        "rss_growth_mib": round(max(growth) / MiB, 1),
    }
    print(json.dumps(figures, indent=2))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


def _latencies(client: httpx.Client, url: str, count: int) -> list[float]:
    for _ in range(5):  # warm: connection open, link pooled, app running
        client.get(url).raise_for_status()
    took = []
    for _ in range(count):
        started = time.perf_counter()
        client.get(url).raise_for_status()
        took.append(time.perf_counter() - started)
    return took


def _download(client: httpx.Client, url: str, size: int) -> float:
    """MiB/s of one download, read as it comes and thrown away."""
    started = time.perf_counter()
    got = 0
    with client.stream("GET", url) as response:
        response.raise_for_status()
        for chunk in response.iter_raw(MiB):
            got += len(chunk)
    assert got == size, f"{got} of {size} bytes"
    return size / MiB / (time.perf_counter() - started)


class _RssWatch:
    """The most a process's resident memory grew over its size when watching started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.growth = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> _RssWatch:
        self._start = _rss(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.growth = max(self.growth, _rss(self.pid) - self._start)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def _address(session_id: str) -> str:
    """The session's address: its network sandbox's when it joined one (it has no network of
    its own then), else its own on the session network."""
    async with aiodocker.Docker() as docker:
        info = await docker.containers.container(f"gpuslice-{session_id}").show()
        if sandbox := joined(info):
            info = await docker.containers.container(sandbox).show()
    [address] = addresses_of(info).values()
    return address


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


if __name__ == "__main__":
    if os.geteuid() != 0 and not os.access("/var/run/docker.sock", os.W_OK):
        raise SystemExit("needs the Docker Engine (run as root or a docker group member)")
    main()
