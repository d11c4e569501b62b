"""The manager as the unit of `gpuslice service install manager` runs it: not root, holding only
CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER (``setpriv`` stands in for systemd's ``User=`` and
``AmbientCapabilities=``). Storage folders still belong to the session user, as with root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuslice.client import Client
from gpuslice.ops.systemd import MANAGER_CAPABILITIES
from tests.ports import free_port
from tests.waits import Deadline, scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
NOBODY = 65534
SESSION_USER = (1000, 1000)  # storage.owner's default

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="running a process as another user needs root and "
                                       "setpriv (util-linux)")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory owned by nobody, as the install makes /var/lib/gpuslice for its user
    (outside pytest's 0700 tree, though the capabilities would pass it anyway)."""
    path = Path(tempfile.mkdtemp(prefix="gpuslice-unpriv-"))
    os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_manager_without_root_gives_folders_to_the_session_user(data_dir: Path,
                                                                  tmp_path: Path) -> None:
    caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in MANAGER_CAPABILITIES)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env |= {"GPUSLICE_DATA_DIR": str(data_dir), "HOME": str(data_dir)}
    log = tmp_path / "manager.log"
    with log.open("w") as out:
        manager = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             f"--inh-caps={caps}", f"--ambient-caps={caps}", "--no-new-privs", "--",
             GPUSLICE, "manager", "serve", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url, manager, log)
        assert _uid_of(manager.pid) == NOBODY
        password = next(line.split(": ", 1)[1] for line in
                        (data_dir / "admin-credentials").read_text().splitlines()
                        if line.startswith("password: "))
        with Client(url) as client:
            client.login("admin", password)
            client.create_folder("data")
            local = tmp_path / "hello.txt"
            local.write_text("hello\n")
            client.upload_file("data", local, "hello.txt")
        [stored] = (data_dir / "storage").rglob("hello.txt")
        assert (stored.stat().st_uid, stored.stat().st_gid) == SESSION_USER
        assert stored.parent.stat().st_uid == SESSION_USER[0]  # the folder itself
        assert "cannot give folders" not in log.read_text()
    finally:
        manager.terminate()
        try:
            manager.wait(scaled(30))
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait()


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[2] for line in status.splitlines()
                    if line.startswith("Uid:")))  # the effective uid


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = Deadline(60)
    while True:
        try:
            if httpx.get(f"{url}/api/v1/health/live", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or deadline.passed:
            raise AssertionError(f"the manager did not answer at {url}:\n{log.read_text()}")
        time.sleep(0.2)
