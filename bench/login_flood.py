"""A login flood against a real manager: /health latency beside its own floor, and the right
password after the throttle window.

    python bench/login_flood.py [--clients 10] [--seconds 20] [--window 10] [--idle 5] [--short]

Runs `gpuslice manager serve` (SQLite in a temporary directory) as a process. First /health is
timed with nothing else going on for --idle seconds (the floor); then --clients anonymous
clients (another process, one connection each) send wrong passwords for one account as fast as
they are answered, for --seconds, while /health is timed again; then, once the throttle window
(--window seconds, GPUSLICE_AUTH__LOGIN_WINDOW) has passed, the right password must log in.
The account is throttled after --failures failed logins in the window (the manager's default,
10; the short run's 3, so that its few seconds of flood, on a loaded machine too, reach it).
Target: /health p99 under 50 ms during the flood. Last line:
``health_p99_idle_ms=… health_p99_flood_ms=… ratio=… flood_requests=… flood_429=…
right_password_after_window=ok|FAILED``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _local import admin_password, free_port, parse_args, wait_live

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
HAMMER = r"""
import asyncio, json, sys, time
import httpx

async def main(url, clients, seconds):
    counts = {}
    stop = time.monotonic() + seconds

    async def one(n):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            while time.monotonic() < stop:
                r = await http.post("/api/v1/auth/login",
                                    json={"username": "admin", "password": f"wrong-{n}"})
                counts[r.status_code] = counts.get(r.status_code, 0) + 1

    await asyncio.gather(*(one(n) for n in range(clients)))
    print(json.dumps(counts))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""


def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
        env |= {"GPUSLICE_DATA_DIR": tmp, "GPUSLICE_AUTH__LOGIN_WINDOW": str(args.window),
                "GPUSLICE_AUTH__LOGIN_FAILURES_PER_USER": str(args.failures)}
        manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                wait_live(str(http.base_url).rstrip("/"), manager)
                idle = _health(http, seconds=args.idle)
                hammer = subprocess.Popen(
                    [sys.executable, "-c", HAMMER, url, str(args.clients), str(args.seconds)],
                    stdout=subprocess.PIPE, text=True,
                )
                flood = _health(http, seconds=args.seconds)
                out, _ = hammer.communicate(timeout=args.seconds + 120)
                counts = {int(k): v for k, v in json.loads(out).items()}
                time.sleep(args.window + 1)
                password = admin_password(Path(tmp))
                r = http.post("/api/v1/auth/login",
                              json={"username": "admin", "password": password})
                after = "ok" if r.status_code == 200 else f"FAILED({r.status_code})"
        finally:
            manager.send_signal(signal.SIGINT)
            manager.wait(30)
    idle_p99, flood_p99 = _pct(idle, 99), _pct(flood, 99)
    print(f"idle: {len(idle)} /health, p50 {statistics.median(idle):.2f} ms, "
          f"p99 {idle_p99:.2f} ms")
    print(f"flood: {args.clients} clients, {sum(counts.values())} logins {counts}; "
          f"{len(flood)} /health, p50 {statistics.median(flood):.2f} ms, p99 {flood_p99:.2f} ms")
    print(f"health_p99_idle_ms={idle_p99:.2f} health_p99_flood_ms={flood_p99:.2f} "
          f"ratio={flood_p99 / idle_p99:.2f} flood_requests={sum(counts.values())} "
          f"flood_429={counts.get(429, 0)} right_password_after_window={after}")


def _health(http: httpx.Client, seconds: float) -> list[float]:
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        assert http.get("/api/v1/health").status_code == 200
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(0.02)
    return times


def _pct(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--window", type=float, default=10, help="auth.login_window")
    parser.add_argument("--idle", type=float, default=5, help="seconds of the idle floor")
    parser.add_argument("--failures", type=int, default=10,
                        help="auth.login_failures_per_user")
    return parse_args(parser, {"clients": 3, "seconds": 3, "window": 3, "idle": 1,
                               "failures": 3})


if __name__ == "__main__":
    main()
