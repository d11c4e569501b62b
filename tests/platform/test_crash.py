"""The manager killed with SIGKILL in the middle of the user's work (manager and agent as two
processes, so that the agent lives on): the CLI says so in one line, every session either
exists or not, none is half-made or made twice, and the agent reconnects by itself."""

from __future__ import annotations

import json
import select
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform, Process, _wait_http

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
TINY = ["--cpu", "0.05", "--mem", "16m"]


def kill_manager(plat: Platform) -> Process:
    """SIGKILL the manager (the first process); returns its stand-in once started again."""
    manager = plat.processes[0]
    manager.stop(signal.SIGKILL)
    again = Process(manager.argv, manager.env)
    plat.processes[0] = again
    return again


def test_killed_during_a_create_of_ten_makes_all_or_none(split_platform: Platform) -> None:
    plat = split_platform
    plat.ok("session", "create", "--name", "before", *SMALL, "--wait")
    database = plat.data_dir / "gpuslice.db"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the create's transaction waits behind this one
    create = subprocess.Popen(
        [GPUSLICE, "session", "create", "--name", "burst", "--count", "10", *TINY],
        env=plat.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_connected(create.pid, plat.port)  # the request is in, stuck behind the lock
        time.sleep(0.5)  # a bounded look: the create cannot end while the lock is held
        assert create.poll() is None
        again = kill_manager(plat)
    finally:
        holder.close()
    out, err = create.communicate(timeout=scaled(30))
    assert create.returncode == 1 and "Traceback" not in out + err
    assert err.startswith(f"error: the manager at {plat.url} stopped answering (")
    assert err.endswith("see `gpuslice session list` before asking again (the sessions exist "
                        "if it lists them, all or none)\n")
    _wait_http(plat.url, again)
    listed = json.loads(plat.ok("session", "list", "--json", "--all-pages"))
    assert [s["name"] for s in listed["items"]] == ["before"]  # none of the ten
    created = json.loads(plat.ok("session", "create", "--name", "burst", "--count", "10",
                                 *TINY, "--json"))
    assert len(created) == 10
    listed = json.loads(plat.ok("session", "list", "--json", "--all-pages"))
    names = sorted(s["name"] for s in listed["items"])
    assert names == sorted(["before", *(f"burst-{i}" for i in range(1, 11))])
    # the agent reconnected by itself and runs what fits, the older session untouched
    assert plat.wait_status("burst-1", {"RUNNING"}, timeout=60)["status"] == "RUNNING"
    assert plat.wait_status("before", {"RUNNING"})["status"] == "RUNNING"
    agent = plat.processes[-1]
    assert agent.popen.poll() is None and "Traceback" not in agent.output


@pytest.fixture
def image_name() -> Iterator[str]:
    name = f"i17test/commit-{uuid.uuid4().hex[:8]}:v1"
    yield name
    subprocess.run(["docker", "rmi", "-f", f"u/admin/{name}"], capture_output=True, check=False)


def test_killed_during_a_commit_the_image_reaches_the_catalog_once(
    split_platform: Platform, image_name: str,
) -> None:
    plat = split_platform
    [src] = json.loads(plat.ok("session", "create", "--name", "src", *SMALL, "--wait", "--json"))
    plat.ok("session", "exec", "src", "--", "sh", "-c", "echo kept > /home/work/note")
    # Docker pauses a container while it commits it: killed after that, the agent is
    # committing. (Killed once the request is marked delivered but before the agent has read
    # the answer that carries it, the request is lost with the manager, and no image comes.)
    with _docker_events(plat.env, f"gpuslice-{src['id']}", "pause") as paused:
        commit = subprocess.Popen([GPUSLICE, "session", "commit", "src", "--name", image_name],
                                  env=plat.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        _wait_delivered(plat.data_dir / "gpuslice.db", "commit")
        paused()
    again = kill_manager(plat)
    out, err = commit.communicate(timeout=scaled(60))
    assert "Traceback" not in out + err
    if commit.returncode != 0:  # (else the answer beat the kill: the commit completed)
        assert commit.returncode == 1
        assert err.startswith(f"error: the manager at {plat.url} stopped answering (")
        assert err.endswith("a commit that finished shows in `gpuslice image list` once the "
                            "manager is back\n")
    _wait_http(plat.url, again)
    reference = f"u/admin/{image_name}"  # a user's commits live in their namespace
    image = _wait_image(plat, reference)  # reported by the node with its owner's label
    assert (image["public"], image["owner"]) == (False, "admin")
    assert plat.wait_status("src", {"RUNNING"})["status"] == "RUNNING"
    again_commit = plat.cli("session", "commit", "src", "--name", image_name)
    assert again_commit.returncode != 0
    assert again_commit.stderr.count("\n") == 1 and "already" in again_commit.stderr
    [new] = json.loads(plat.ok("session", "create", "--name", "from-it", "--image", reference,
                               *SMALL, "--wait", "--json"))
    assert plat.ok("session", "exec", "from-it", "--", "cat", "/home/work/note") == "kept\n"
    assert new["image"] == reference


def _wait_connected(pid: int, port: int) -> None:
    """Until process ``pid`` holds an established TCP connection to ``port``."""

    def connected() -> bool:
        inodes = {str(fd.readlink())[8:-1] for fd in Path(f"/proc/{pid}/fd").iterdir()
                  if fd.is_symlink() and str(fd.readlink()).startswith("socket:[")}
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if fields[9] in inodes and remote_port == port and fields[3] == "01":
                return True
        return False

    _until(connected, f"process {pid} never connected to port {port}")


@contextmanager
def _docker_events(
    env: dict[str, str], container: str, action: str
) -> Iterator[Callable[[], None]]:
    """Watch the engine's events from now on; yields a call that waits (30 s at most) until
    ``container`` has had ``action``."""
    watcher = subprocess.Popen(
        ["docker", "events", "--since", f"{time.time() - 1:.3f}",
         "--filter", f"container={container}", "--filter",
         f"event={action}", "--format", "{{.Action}}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert watcher.stdout is not None

    def seen() -> None:
        ready, _, _ = select.select([watcher.stdout], [], [], 30)
        assert ready and watcher.stdout.readline().strip() == action, (
            f"{container} had no {action} event within 30s")

    try:
        yield seen
    finally:
        watcher.kill()
        watcher.wait()


def _wait_delivered(database: Path, kind: str) -> None:
    def delivered() -> bool:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            row = db.execute("SELECT delivered_at FROM agent_requests WHERE kind = ?",
                             (kind,)).fetchone()
        return row is not None and row[0] is not None

    _until(delivered, f"no {kind} request was delivered")


def _until(check: Callable[[], bool], failure: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{failure} within {timeout:.0f}s")
        time.sleep(0.02)


def _wait_image(plat: Platform, name: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + scaled(timeout)
    while True:
        images = json.loads(plat.ok("image", "list", "--json"))
        found = [i for i in images if i["name"] == name]
        if found:
            assert len(found) == 1
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never reached the catalog: {images}")
        time.sleep(0.5)
