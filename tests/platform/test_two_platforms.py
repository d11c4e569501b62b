"""Two platforms on one Docker Engine (issue 35, finding 2): two `gpuslice up` with data
directories of their own, each with its default node name, keep their sessions; a node of the
same name as a live one on that engine is refused in one sentence, touching nothing."""

from __future__ import annotations

import json
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


def test_two_ups_on_one_engine_keep_their_sessions(
    base_image: str, tmp_path: Path, platforms: list[Platform]
) -> None:
    for part in "xyz":
        (tmp_path / part).mkdir()
    first, second = new_platform(tmp_path / "x"), new_platform(tmp_path / "y")
    platforms.extend([first, second])
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
    third = new_platform(tmp_path / "z")
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
    plat = new_platform(tmp_path)
    platforms.append(plat)
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
