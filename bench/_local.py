"""What the benchmarks that start a manager of their own share: a free port, waiting until it
answers, and the first admin's password (from the file the manager writes at its first start)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_live(url: str, manager: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until the manager at ``url`` answers its liveness check (exits if it stops first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if manager.poll() is not None:
            raise SystemExit("the manager exited")
        try:
            if httpx.get(url + "/api/v1/health/live", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the manager did not start")


def admin_password(data_dir: Path) -> str:
    text = (data_dir / "admin-credentials").read_text()
    return next(line.split(": ", 1)[1] for line in text.splitlines()
                if line.startswith("password: "))
