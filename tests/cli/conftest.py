"""A real manager (`gpuslice manager serve`, SQLite) for the CLI's tests, and the environment of
a CLI logged in to it as the admin, with a home of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpuslice.client import Client
from tests.conftest import seed_database
from tests.ports import free_port
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
IMAGE = "tests/idle:1"  # never pulled: no node joins, the sessions wait PENDING


@dataclass(frozen=True)
class Manager:
    url: str
    env: dict[str, str]  # the CLI's: GPUSLICE_URL and GPUSLICE_TOKEN of the admin

    def client(self) -> Client:
        return Client(self.url, self.env["GPUSLICE_TOKEN"])

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([GPUSLICE, *args], env=self.env, capture_output=True, text=True,
                              timeout=60, check=False)


@pytest.fixture
def manager(tmp_path: Path, sqlite_at_head: Path) -> Iterator[Manager]:
    """A manager whose admin owns three PENDING sessions."""
    seed_database(tmp_path / "data", sqlite_at_head)
    port = free_port()
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
    }
    log = (tmp_path / "manager.log").open("wb")
    process = subprocess.Popen(
        [GPUSLICE, "manager", "serve", "--port", str(port)], stdout=log, stderr=log,
        env=env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                   "GPUSLICE_SESSIONS__ALLOWED_IMAGES": json.dumps([IMAGE]),
                   # the listing tests make hundreds of PENDING sessions, 100 per request
                   "GPUSLICE_SESSIONS__MAX_COUNT": "100",
                   "GPUSLICE_SESSIONS__MAX_PENDING": "1000"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, tmp_path / "data" / "admin-credentials", process)
        with Client(url) as admin:
            admin.login("admin", _password(tmp_path / "data" / "admin-credentials"))
            token = admin.create_token("tests-cli").token
            admin.create_sessions(image=IMAGE, cpu="0.25", mem="64m", count=3, name="idle")
        yield Manager(url, env | {"GPUSLICE_URL": url, "GPUSLICE_TOKEN": token})
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def _wait_ready(url: str, credentials: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200 \
                    and credentials.is_file():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the manager did not start at {url} (exit code {process.poll()})")


def _password(credentials: Path) -> str:
    return next(line.split(": ", 1)[1] for line in credentials.read_text().splitlines()
                if line.startswith("password: "))
