"""Monitoring as users see it, on a real manager and agent (real Docker, one mock GPU): two
sessions share the GPU, one busy (a process declaring a simulated load) and one idle; each
shows its own numbers, the idle one is reclaimed and the busy one keeps running; the watchdog
stops a session over its slice; a real Prometheus scrapes the per-session series."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prometheus import DASHBOARD, prometheus, prometheus_binary
from tests.waits import scaled

from .conftest import Platform, run_split

pytestmark = pytest.mark.docker

GiB = 1024**3
SMALL = ["--cpu", "0.25", "--mem", "256m", "--gpu", "0.5"]
TOKEN = "scrape-token-for-tests"


@pytest.fixture
def monitored(base_image: str, tmp_path: Path) -> Iterator[Platform]:
    """`manager serve` + `agent serve`, 2 fGPU per 8 GiB mock GPU, reclaim checked often."""
    yield from run_split(tmp_path, {
        "GPUSLICE_NODES__FGPU_PER_GPU": "2",
        "GPUSLICE_MONITORING__RECLAIM_INTERVAL": "0.5",
        "GPUSLICE_MONITORING__SCRAPE_TOKEN": TOKEN,
    })


def stats(plat: Platform, ref: str, *args: str) -> dict[str, Any]:
    return json.loads(plat.ok("session", "stats", ref, "--json", *args))


def wait_gpu(plat: Platform, ref: str, mem: int, util: int, timeout: float = 60) -> None:
    """Until the session's own GPU figures are ``mem`` bytes and ``util`` %."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        now = stats(plat, ref)["now"]
        gpus = now["gpus"] if now else None
        if gpus and (gpus[0]["mem_used"], gpus[0]["utilization"]) == (mem, util):
            return
        assert time.monotonic() < deadline, f"{ref}: GPU figures {gpus}, wanted {mem}, {util}"
        time.sleep(0.5)


def test_each_session_shows_its_own_gpu_use_the_idle_one_is_reclaimed_the_greedy_stopped(
    monitored: Platform, tmp_path: Path
) -> None:
    plat = monitored
    prometheus_binary()  # skip early, with the reason, rather than after the sessions ran
    plat.ok("admin", "policy", "set", "admin", "--idle-window", "10s", "--idle-gpu-below", "1")
    plat.ok("session", "create", "--type", "batch", "--name", "busy", *SMALL, "--command",
            "gpuslice-mock-gpu --mem 1g --util 80 --seconds 900")
    plat.ok("session", "create", "--name", "idle", *SMALL)
    plat.wait_status("busy", {"RUNNING"}, timeout=60)
    plat.wait_status("idle", {"RUNNING"}, timeout=60)

    wait_gpu(plat, "busy", GiB, 80)  # its own process, mapped by cgroup: not the device's
    wait_gpu(plat, "idle", 0, 0)  # on the same GPU, busy at 80 %: about 0 for this one
    countdown = json.loads(plat.ok("session", "show", "idle", "--json"))["reclaim"]
    assert countdown["reason"] == "idle for 10 s: GPU util < 1 %"
    assert "idle for 10 s: GPU util < 1 %" in plat.ok("session", "show", "idle")

    ended = plat.wait_status("idle", {"TERMINATED"}, timeout=60)
    assert ended["status_reason"] == "idle for 10 s: GPU util < 1 %"
    assert json.loads(plat.ok("session", "show", "busy", "--json"))["status"] == "RUNNING"

    inside = plat.ok("session", "exec", "busy", "--", "gpuslice-smi")
    assert "1024 MiB / 2048 MiB" in inside and "80 %" in inside
    apps = plat.ok("session", "exec", "busy", "--", "nvidia-smi", "--format=csv,noheader",
                   "--query-compute-apps=pid,process_name,used_memory")
    [(pid, name, used)] = list(csv.reader(apps.splitlines(), skipinitialspace=True))
    assert (name, used) == ("python3", "1024 MiB"), apps  # issue 34: as scripts read it
    started = plat.ok("session", "exec", "busy", "--", "cat", f"/proc/{pid}/cmdline")
    assert "gpuslice-mock-gpu" in started  # the pid as the session sees it, not the host's
    history = plat.ok("session", "exec", "busy", "--", "gpuslice-smi", "--history", "10m")
    assert "usage since" in history and "80 %" in history
    other = plat.cli("session", "exec", "busy", "--", "python3", "-c",
                     "import gpuslice_endpoint as e; "
                     "e.call('GET', '/v1/usage/history?session_id=someone-else')")
    assert other.returncode != 0 and "only for session" in other.stderr

    after = stats(plat, "idle")  # kept after the session ended
    assert after["status"] == "TERMINATED" and after["points"]
    assert {p["gpu_util"] for p in after["points"]} == {0}
    usage = plat.ok("usage", "--csv")
    assert usage.splitlines()[1].startswith("admin,")

    with prometheus(plat.url.removeprefix("http://"), TOKEN, tmp_path / "prometheus") as prom:
        [busy] = prom.wait_for('gpuslice_session_gpu_utilization{session_name="busy"}')
        assert busy["metric"]["user"] == "admin" and busy["metric"]["node"] == plat.node
        assert float(busy["value"][1]) == 80
        [memory] = prom.wait_for('gpuslice_session_gpu_memory_bytes{session_name="busy"}')
        assert float(memory["value"][1]) == GiB
        [device] = prom.wait_for("DCGM_FI_DEV_GPU_UTIL")
        assert float(device["value"][1]) == 80 and device["metric"]["Hostname"] == plat.node
        for panel in json.loads(DASHBOARD.read_text())["panels"]:  # every query is valid
            for target in panel["targets"]:
                prom.query(target["expr"].replace("$user", ".*").replace("$node", ".*"))

    # The watchdog decides on the same readings, on this mock node too: over its slice (2 GiB
    # of this GPU) a session is stopped with the reason.
    plat.ok("session", "create", "--type", "batch", "--name", "greedy", *SMALL, "--command",
            "gpuslice-mock-gpu --mem 3g --util 10 --seconds 900")
    stopped = plat.wait_status("greedy", {"ERROR", "TERMINATED"}, timeout=90)
    assert (stopped["status"], stopped["status_reason"]) == (
        "ERROR", "exceeded its GPU memory slice")
