"""Two platforms on one Docker Engine (issue 35, finding 2): two `gpuslice up` with data
directories of their own, each with its default node name, keep their sessions; a node of the
same name as a live one on that engine is refused in one sentence, touching nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import GPUSLICE, Platform, Process, new_platform

pytestmark = pytest.mark.docker

SMALL = ("--cpu", "0.25", "--mem", "256m")


def start_default_up(plat: Platform) -> Process:
    """`gpuslice up` as most users run it: no --node-name (the data directory's own)."""
    argv = [GPUSLICE, "up", "--data-dir", str(plat.data_dir), "--port", str(plat.port),
            "--mock-gpus", "1x8GiB", "--fgpu-per-gpu", "2"]
    up = Process(argv, plat.env)
    plat.processes.append(up)
    up.wait_for("gpuslice is up")
    plat.node = (plat.data_dir / "node-name").read_text().strip()  # its containers' cleanup
    up.wait_for(f"agent {plat.node}: joined")
    return up


def places(tmp_path: Path, platforms: list[Platform], count: int) -> list[Platform]:
    """``count`` platforms' places (data directory, port, CLI login), nothing started."""
    made = []
    for index in range(count):
        (tmp_path / str(index)).mkdir()
        made.append(new_platform(tmp_path / str(index)))
    platforms.extend(made)
    return made


def test_two_ups_on_one_engine_keep_their_sessions(
    base_image: str, tmp_path: Path, platforms: list[Platform]
) -> None:
    first, second, third = places(tmp_path, platforms, 3)
    start_default_up(first)
    mine = first.session("x-shell", base_image, *SMALL)
    start_default_up(second)
    assert first.node != second.node  # both derived from the host name, one per data directory
    theirs = second.session("y-shell", base_image, *SMALL)

    # Each agent's reconcile passes (one at least every 10 s) and heartbeats went by: on main
    # the second removed the first's session within about 10 s ("stopped unexpectedly with
    # code 143"), as it was not its manager's.
    second.wait_next_heartbeat(count=3)
    first.wait_next_heartbeat(count=3)
    for plat, sid in ((first, mine), (second, theirs)):
        shown = json.loads(plat.ok("session", "show", sid, "--json"))
        assert (shown["status"], shown["status_reason"]) == ("RUNNING", "running"), shown
    listed = json.loads(first.ok("node", "list", "--json"))
    assert [n["name"] for n in listed] == [first.node]  # each manager knows its node only

    # An explicit node of the first's name, from a third data directory, while it runs:
    # refused in one sentence naming the first; nothing of the first is touched.
    argv = [GPUSLICE, "up", "--data-dir", str(third.data_dir), "--port", str(third.port),
            "--mock-gpus", "1x8GiB", "--node-name", first.node]
    done = subprocess.run(argv, env=third.env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: node name '{first.node}' is already used on this Docker "
                            f"Engine by a live agent (pid {first.processes[0].popen.pid}"), error
    assert "another name (`gpuslice up --node-name`" in error
    first.wait_next_heartbeat()
    shown = json.loads(first.ok("session", "show", mine, "--json"))
    assert shown["status"] == "RUNNING", shown


def test_the_default_node_name_is_kept_with_the_data_directory(
    base_image: str, tmp_path: Path, platforms: list[Platform]
) -> None:
    [plat] = places(tmp_path, platforms, 1)
    up = start_default_up(plat)
    name = plat.node
    sid = plat.session("kept", base_image, *SMALL)
    up.stop()
    plat.processes.remove(up)
    again = start_default_up(plat)  # same data directory: same node, its session adopted
    assert plat.node == name and again.popen.poll() is None
    plat.wait_next_heartbeat(count=2)
    shown = json.loads(plat.ok("session", "show", sid, "--json"))
    assert shown["status"] == "RUNNING" and shown["placement"]["node_name"] == name, shown


def test_sessions_of_a_platform_restored_elsewhere_reach_their_endpoint_again(
    base_image: str, tmp_path: Path, platforms: list[Platform]
) -> None:
    # Issue 35, finding 6: restored into a new data directory, the platform adopted the
    # running containers with mounts into the old one (endpoint dead: gpuslice-smi failed).
    old, new = places(tmp_path, platforms, 2)
    up = start_default_up(old)
    sid = old.session("kept", base_image, "--gpu", "0.5", *SMALL)
    backup = tmp_path / "platform.backup"
    done = old.cli("admin", "backup", str(backup), "--quiet",
                   env_extra={"GPUSLICE_DATA_DIR": str(old.data_dir)})
    assert done.returncode == 0, done.stderr
    up.stop()  # its session containers keep running

    new.data_dir.mkdir(mode=0o700)
    done = new.cli("admin", "restore", str(backup), "--quiet",
                   "--key", str(old.data_dir / "backup-key"),  # the key of the platform backed up
                   env_extra={"GPUSLICE_DATA_DIR": str(new.data_dir)})
    assert done.returncode == 0, done.stderr
    shutil.copy(old.data_dir / "admin-credentials", new.data_dir / "admin-credentials")
    start_default_up(new)
    assert new.node == old.node  # the restored manager's node, not a new one
    shown = new.wait_reason(sid, "restarted: its container was made by another agent",
                            timeout=120)
    assert shown["status"] == "RUNNING", shown
    assert [h["status"] for h in shown["history"]][-2:] == ["RUNNING", "RUNNING"]
    # Its in-session endpoint answers, served by the new data directory's agent.
    asked = new.ok("session", "exec", sid, "--", "python3", "-c",
                   "import gpuslice_endpoint as e; print(e.call('GET', '/v1/session')['node'])")
    assert asked.strip() == new.node, asked
