"""The Docker Engine going away under a running platform, on a Docker Engine of the tests'
own (``private_dockerd``: stopping it touches no one else's containers): sessions are never
lost, each wait says why, and the platform recovers by itself when Docker is back."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.dockerd import PrivateDockerd
from tests.waits import scaled, wait_for

from .conftest import GPUSLICE, Platform, Process, new_platform, run_split

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SMALL = ["--cpu", "0.25", "--mem", "256m"]
# Heartbeats and the node sweep fast enough that an outage outlasts node_timeout in seconds.
FAST_NODES = {"GPUSLICE_NODES__NODE_TIMEOUT": "6", "GPUSLICE_NODES__HEARTBEAT_INTERVAL": "0.5",
              "GPUSLICE_NODES__SWEEP_INTERVAL": "0.5"}


@pytest.fixture
def up_on_private(running_private_dockerd: PrivateDockerd, tmp_path: Path,
                  platforms: list[Platform]) -> Platform:
    plat = new_platform(tmp_path, running_private_dockerd.env() | FAST_NODES)
    platforms.append(plat)
    plat.start_up()
    return plat


def containers(engine: PrivateDockerd, node: str) -> dict[str, str]:
    """session id -> container id of a node's session containers on the private engine."""
    out = engine.docker("ps", "-a", "--filter", f"label=gpuslice.node={node}",
                        "--filter", "label=gpuslice.session-id", "--format",
                        '{{.ID}} {{.Label "gpuslice.session-id"}}').stdout
    return {sid: cid for cid, sid in (line.split() for line in out.splitlines() if line)}


def _swept_since(plat: Platform, moment: datetime) -> bool:
    """Whether the manager's node sweep (GET /api/v1/health/loops) ended a pass after
    ``moment``."""
    loops = httpx.get(f"{plat.url}/api/v1/health/loops", timeout=10).json()["loops"]
    last = loops["node_sweep"]["last_pass_at"]
    return last is not None and datetime.fromisoformat(last) > moment


def node_of(plat: Platform) -> dict:
    [node] = json.loads(plat.ok("node", "list", "--json"))
    return node


def test_docker_stopped_under_running_sessions_loses_none(
    up_on_private: Platform, running_private_dockerd: PrivateDockerd,
) -> None:
    plat, engine = up_on_private, running_private_dockerd
    up = plat.processes[-1]
    created = json.loads(plat.ok("session", "create", "--name", "live", *SMALL, "--count", "2",
                                 "--wait", "--json"))
    before = {s["name"]: plat.wait_status(s["name"], {"RUNNING"}) for s in created}
    running = containers(engine, plat.node)

    engine.stop()  # live-restore: the containers keep running without their engine
    up.wait_for("agent: lost the Docker Engine")
    # a sweep of lost nodes that ended two node timeouts later: it would have called the node
    # lost, were the agent's heartbeats not seen
    swept_after = datetime.now(UTC) + timedelta(seconds=2 * 6)
    wait_for(lambda: _swept_since(plat, swept_after), 60, "a node sweep two node timeouts on")
    node = node_of(plat)
    assert node["status"] == "ALIVE"
    assert node["engine_error"].startswith("the Docker Engine is not running")

    # A session asked for meanwhile waits, saying why; Ctrl-C on --wait leaves it be.
    waiting = subprocess.Popen(
        [GPUSLICE, "session", "create", "--name", "later", *SMALL, "--wait"], env=plat.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    later = plat.wait_reason("later", "waiting for the Docker Engine on")
    assert later["status"] in ("SCHEDULED", "PREPARING")
    waiting.send_signal(signal.SIGINT)
    out, err = waiting.communicate(timeout=scaled(20))
    assert waiting.returncode == 130
    assert err.strip() == ("error: stopped waiting; later go on without you (see `gpuslice "
                           "session list`)")

    mark = len(up.lines)
    engine.start()
    up.wait_for("agent: the Docker Engine is back", after=mark)
    assert plat.wait_status("later", {"RUNNING"}, timeout=60)["status"] == "RUNNING"
    for name, session in before.items():
        after = plat.wait_status(name, {"RUNNING"})
        assert len(after["history"]) == len(session["history"])  # never left RUNNING
    assert {sid: cid for sid, cid in containers(engine, plat.node).items()
            if sid in running} == running  # the very containers, adopted again
    assert "hi" in plat.ok("session", "exec", "live-1", "--", "echo", "hi")
    assert _eventually(lambda: node_of(plat)["engine_error"] is None)


def test_docker_restarted_without_live_restore_ends_its_sessions_with_the_reason(
    up_on_private: Platform, running_private_dockerd: PrivateDockerd,
) -> None:
    plat, engine = up_on_private, running_private_dockerd
    up = plat.processes[-1]
    plat.ok("session", "create", "--name", "before", *SMALL, "--wait")
    engine.stop()
    engine.start(live_restore=False)  # as Docker runs by default: its containers died
    before = plat.wait_status("before", {"ERROR"}, timeout=60)
    assert before["status_reason"].startswith("its container stopped unexpectedly")
    [after] = json.loads(plat.ok("session", "create", "--name", "after", *SMALL, "--json"))
    assert plat.wait_status("after", {"RUNNING"}, timeout=60)["id"] == after["id"]
    assert up.popen.poll() is None  # the same `gpuslice up` did it all
    assert "agent: the Docker Engine is back" in up.output


def test_the_standard_image_deleted_under_up_is_built_again_and_sessions_wait(
    up_on_private: Platform, running_private_dockerd: PrivateDockerd, base_image: str,
) -> None:
    plat, engine = up_on_private, running_private_dockerd
    up = plat.processes[-1]
    plat.ok("session", "create", "--name", "old", *SMALL, "--wait")
    engine.docker("rmi", "-f", base_image)  # by hand, or a `docker image prune -a`
    [new] = json.loads(plat.ok("session", "create", "--name", "new", *SMALL, "--json"))
    up.wait_for(f"the standard session image {base_image} was deleted: building it again",
                timeout=30)
    up.wait_for(f"built {base_image}", timeout=180)
    assert plat.wait_status("new", {"RUNNING"}, timeout=60)["id"] == new["id"]
    assert [h["status"] for h in plat.wait_status("new", {"RUNNING"})["history"]] == [
        "PENDING", "SCHEDULED", "PREPARING", "RUNNING"]  # it waited; it never failed
    assert plat.wait_status("old", {"RUNNING"})["status"] == "RUNNING"


def test_up_killed_while_building_its_image_builds_it_at_the_next_start(
    running_private_dockerd: PrivateDockerd, tmp_path: Path, platforms: list[Platform],
    base_image: str,
) -> None:
    engine = running_private_dockerd
    engine.docker("rmi", "-f", base_image)
    plat = new_platform(tmp_path, engine.env())
    platforms.append(plat)
    stopped = Process(plat.up_argv(), plat.env)  # Ctrl-C during the build stops it at once
    stopped.wait_for(f"base: building {base_image}", timeout=60)
    stopped.stop(signal.SIGINT, timeout=20)
    assert stopped.popen.returncode == 0, stopped.output
    assert "stopped before the standard session image was built" in stopped.output
    assert "Traceback" not in stopped.output
    first = Process(plat.up_argv(), plat.env)
    plat.processes.append(first)
    first.wait_for(f"base: building {base_image}", timeout=60)
    first.wait_for("base: Step 2/", timeout=60)  # inside the build
    first.stop(signal.SIGKILL)
    plat.processes.remove(first)
    again = plat.start_up()
    assert f"the last gpuslice up on {plat.data_dir} (pid {first.popen.pid}) did not stop " \
           "cleanly" in again.output
    assert f"built {base_image}" in again.output
    plat.ok("session", "create", "--name", "fresh", *SMALL, "--wait")
    assert plat.wait_status("fresh", {"RUNNING"})["image"] == base_image
    listed = engine.docker("ps", "-a", "--format", '{{.ID}} {{.Label "gpuslice.node"}}').stdout
    leftovers = [line for line in listed.splitlines() if len(line.split()) == 1]
    assert leftovers == []  # no half-built step's container left behind


@pytest.fixture
def split_on_private(running_private_dockerd: PrivateDockerd,
                     tmp_path: Path) -> Iterator[Platform]:
    yield from run_split(tmp_path, {"GPUSLICE_NODES__FGPU_PER_GPU": "2"},
                         running_private_dockerd.env())


def test_agent_serve_waits_for_docker_saying_why_then_joins(
    split_on_private: Platform, running_private_dockerd: PrivateDockerd,
) -> None:
    plat, engine = split_on_private, running_private_dockerd
    plat.processes.pop().stop()
    engine.stop()
    env = json.loads(plat.env["AGENT_ENV_JSON"])
    agent = Process([GPUSLICE, "agent", "serve"], env)
    plat.processes.append(agent)
    agent.wait_for(f"agent: the Docker Engine is not running (no socket at {engine.socket}): "
                   "start it", timeout=30)
    assert "Traceback" not in agent.output
    engine.start()
    agent.wait_for("agent: the Docker Engine answers", timeout=30)
    agent.wait_for(f"agent {plat.node}: joined", timeout=30)
    plat.ok("session", "create", "--name", "ok", *SMALL, "--wait")
    assert plat.wait_status("ok", {"RUNNING"})["status"] == "RUNNING"


def test_dockerd_restarted_under_agent_serve_it_reconnects_by_itself(
    split_on_private: Platform, running_private_dockerd: PrivateDockerd,
) -> None:
    plat, engine = split_on_private, running_private_dockerd
    plat.ok("session", "create", "--name", "before", *SMALL, "--wait")
    agent = plat.processes[-1]
    engine.stop()
    engine.start(live_restore=False)  # as Docker runs by default: its containers died
    before = plat.wait_status("before", {"ERROR"}, timeout=90)
    assert "stopped unexpectedly" in before["status_reason"]
    [after] = json.loads(plat.ok("session", "create", "--name", "after", *SMALL, "--json"))
    assert plat.wait_status("after", {"RUNNING"}, timeout=60)["id"] == after["id"]
    assert agent.popen.poll() is None  # the same agent process did it all
    assert "lost the Docker Engine" in agent.output


def _eventually(check: Callable[[], bool], timeout: float = 15) -> bool:
    deadline = time.monotonic() + scaled(timeout)
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
