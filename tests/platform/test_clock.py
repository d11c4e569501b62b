"""The wall clock jumping forward under `gpuslice up` (NTP stepping it, a VM resumed): no node
is called lost, no session ends; tokens expire by the new date, as they should, and the CLI
says so. The jump is libfaketime's (Debian `faketime`), in the `up` process only: its
timestamp file moves the process's wall clock while monotonic time stays true."""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import pytest

from .conftest import Platform, new_platform

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
NODE_TIMEOUT = 6.0  # heartbeats every 0.5 s; a loaded machine can delay some by seconds


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.skip("needs libfaketime (Debian package faketime; tools/host-setup.sh --postgres)")
    return found[0]


def test_a_clock_jump_loses_no_node_and_expires_tokens_by_the_new_date(
    base_image: str, tmp_path: Path, platforms: list[Platform],
) -> None:
    clock = tmp_path / "faketime"
    clock.write_text("+0\n")
    plat = new_platform(tmp_path, {
        "GPUSLICE_NODES__NODE_TIMEOUT": str(NODE_TIMEOUT),
        "GPUSLICE_NODES__HEARTBEAT_INTERVAL": "0.5", "GPUSLICE_NODES__SWEEP_INTERVAL": "0.5",
    })
    platforms.append(plat)
    up = plat.start_up(env={  # the file is read again once a second at most
        "LD_PRELOAD": libfaketime(), "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    })
    try:
        _jumps(plat, clock)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n--- gpuslice up:\n{up.output[-3000:]}") from None
    assert "the wall clock jumped +7200 s" in up.output
    assert "LOST" not in up.output


def _jumps(plat: Platform, clock: Path) -> None:
    plat.ok("session", "create", "--name", "long", *SMALL, "--wait")
    before = plat.wait_status("long", {"RUNNING"})
    short = json.loads(plat.ok("token", "create", "day-pass", "--days", "1", "--json"))
    time.sleep(NODE_TIMEOUT + 1)  # past the grace a fresh manager gives its nodes

    clock.write_text("+2h\n")
    # A sweep fooled by the jump calls the node lost at once; one that waits out its grace
    # judges fresh heartbeats after it.
    time.sleep(NODE_TIMEOUT + 2)
    [node] = json.loads(plat.ok("node", "list", "--json"))
    assert node["status"] == "ALIVE"
    after = plat.wait_status("long", {"RUNNING"})
    assert len(after["history"]) == len(before["history"])  # never left RUNNING

    clock.write_text("+2d\n")  # past the day-pass's expiry
    time.sleep(NODE_TIMEOUT + 2)
    expired = plat.cli("session", "list", env_extra={"GPUSLICE_TOKEN": short["token"]})
    assert (expired.returncode, expired.stderr) == (1, (
        f"error: this token has expired: log in again with `gpuslice login {plat.url}`\n"))
    assert plat.wait_status("long", {"RUNNING"})["history"] == after["history"]
    assert "hi" in plat.ok("session", "exec", "long", "--", "echo", "hi")
