"""CLI start time: `gpuslice --help` and `gpuslice session list --json`, next to `python -c pass`.

A real manager (`gpuslice manager serve`, SQLite in a temporary data directory, a free local
port) runs in a subprocess; the CLI is logged in through ``GPUSLICE_URL`` / ``GPUSLICE_TOKEN``
with a temporary ``HOME`` and ``XDG_CONFIG_HOME``, so the user's own login is never read or
written. A few sessions are created (they wait PENDING: no node joins), then each round runs
the three commands once, one after the other, so that all three see the same machine load.
The wall time of a command is the time of the whole process, start to exit.

    python bench/cli_start.py [--runs 15] [--sessions 5] [--short]

Last line: ``help_median_s=<s> list_median_s=<s> python_floor_s=<s> help_ratio=<x>
list_ratio=<x>`` (ratio: the command's median over the floor's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _local import parse_args

from gpuslice.client import ApiError, Client

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
IMAGE = "bench/idle:1"  # never pulled: the sessions wait PENDING
CREDENTIALS_FILE = "admin-credentials"  # where the manager writes the first admin's password


def start_manager(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    env = _clean_env(tmp) | {
        "GPUSLICE_DATA_DIR": str(tmp / "data"),
        # no node joins, so no node reports images: the sessions' image must be allowed here
        "GPUSLICE_SESSIONS__ALLOWED_IMAGES": json.dumps([IMAGE]),
    }
    with (tmp / "manager.log").open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [GPUSLICE, "manager", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=log, stderr=log, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the manager exited ({proc.returncode}):\n"
                             + (tmp / "manager.log").read_text()[-2000:])
        try:
            httpx.get(f"{url}/api/v1/health", timeout=1.0).raise_for_status()
            if (tmp / "data" / CREDENTIALS_FILE).is_file():
                return proc
        except httpx.HTTPError:  # not listening yet, or the database not ready
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the manager did not start in 60 s")


def log_in(tmp: Path, url: str, sessions: int) -> dict[str, str]:
    """The environment of a CLI logged in as the admin, which owns ``sessions`` sessions."""
    text = (tmp / "data" / CREDENTIALS_FILE).read_text()
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    with Client(url) as admin:
        admin.login(fields["username"], fields["password"])
        token = admin.create_token("bench-cli-start").token
        if sessions:
            admin.create_sessions(image=IMAGE, gpu=0, cpu="0.25", mem="64m",
                                  count=sessions, name="bench")
    return _clean_env(tmp) | {"GPUSLICE_URL": url, "GPUSLICE_TOKEN": token}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return elapsed, done.stdout


def main() -> None:
    args = _parse()
    commands = {
        "help": [GPUSLICE, "--help"],
        "list": [GPUSLICE, "session", "list", "--json"],
        "python_floor": [sys.executable, "-c", "pass"],
    }
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        proc = start_manager(tmp, port)
        try:
            env = log_in(tmp, f"http://127.0.0.1:{port}", args.sessions)
            _, listed = timed(commands["list"], env)  # warm the page cache; check the output
            if len(json.loads(listed)["items"]) != args.sessions:
                raise SystemExit(f"session list --json printed {listed[:200]!r}")
            times: dict[str, list[float]] = {key: [] for key in commands}
            for _ in range(args.runs):
                for key, argv in commands.items():
                    times[key].append(timed(argv, env)[0])
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    _report(times, args.runs)


def _report(times: dict[str, list[float]], runs: int) -> None:
    medians = {key: statistics.median(values) for key, values in times.items()}
    floor = medians["python_floor"]
    print(f"{runs} runs each, wall seconds per process")
    print(f"{'command':<14} {'median':>8} {'min':>8} {'max':>8} {'x floor':>8}")
    for key, values in times.items():
        print(f"{key:<14} {medians[key]:8.3f} {min(values):8.3f} {max(values):8.3f} "
              f"{medians[key] / floor:8.1f}")
    print(f"help_median_s={medians['help']:.3f} list_median_s={medians['list']:.3f} "
          f"python_floor_s={floor:.3f} help_ratio={medians['help'] / floor:.1f} "
          f"list_ratio={medians['list'] / floor:.1f}")


def _clean_env(tmp: Path) -> dict[str, str]:
    """This environment without any gpuslice setting, and a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    home = tmp / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    return env | {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--sessions", type=int, default=5, help="sessions the list returns")
    return parse_args(parser, {"runs": 1, "sessions": 2})


if __name__ == "__main__":
    try:
        main()
    except ApiError as err:
        raise SystemExit(f"error: {err}") from None
