"""A node agent and a manager as separate processes, with real Docker and mock GPUs."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.waits import scaled, wait_for

from .conftest import Platform, start_agent

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]


def containers_of(node: str) -> dict[str, str]:
    """session id -> container id, for every session container (running or not) of a node."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=gpuslice.node={node}",
         "--filter", "label=gpuslice.session-id", "--format",
         '{{.ID}} {{.Label "gpuslice.session-id"}}'],
        capture_output=True, text=True, check=True,
    ).stdout
    pairs = [line.split() for line in out.splitlines() if line.strip()]
    return {sid: cid for cid, sid in pairs}


def inspect(container: str) -> dict:
    out = subprocess.run(["docker", "inspect", container], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)[0]


def test_limits_labels_and_allocation_inside_the_container(split_platform: Platform) -> None:
    plat = split_platform
    [session] = json.loads(plat.ok("session", "create", "--name", "box", "--gpu", "0.5",
                                   "--cpu", "0.5", "--mem", "300m", "--wait", "--json"))
    assert session["status"] == "RUNNING"
    info = inspect(containers_of(plat.node)[session["id"]])
    labels = info["Config"]["Labels"]
    assert labels["gpuslice.session-id"] == session["id"]
    assert labels["gpuslice.owner"] == "admin"
    label_allocation = json.loads(labels["gpuslice.allocation"])
    host = info["HostConfig"]
    assert host["Memory"] == 300 * 1024**2 and host["NanoCpus"] == 500_000_000
    assert host["Privileged"] is False and host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"][0]
    assert info["Config"]["User"] == "1000:1000"
    assert not any("docker.sock" in m["Source"] for m in info["Mounts"])

    script = (
        "for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes "
        "/sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us; do [ -r $f ] && echo $f $(cat $f); done; true"
    )
    cgroup = dict(line.split(" ", 1) for line in
                  plat.ok("session", "exec", "box", "--", "sh", "-c", script).splitlines())
    memory = cgroup.get("/sys/fs/cgroup/memory.max") or cgroup[
        "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    assert int(memory) == 300 * 1024**2
    if "/sys/fs/cgroup/cpu.max" in cgroup:
        quota, period = cgroup["/sys/fs/cgroup/cpu.max"].split()
    else:
        quota = cgroup["/sys/fs/cgroup/cpu/cpu.cfs_quota_us"]
        period = cgroup["/sys/fs/cgroup/cpu/cpu.cfs_period_us"]
    assert int(quota) * 2 == int(period)  # half a core

    inside = json.loads(plat.ok("session", "exec", "box", "--", "cat",
                                "/etc/gpuslice/allocation.json"))
    assert inside == label_allocation
    [device] = inside["devices"]
    assert device["memory_bytes"] == 2 * 1024**3  # 0.5 fGPU of 2 fGPU per 8 GiB GPU
    env = plat.ok("session", "exec", "box", "--", "env")
    assert f"CUDA_VISIBLE_DEVICES={device['uuid']}" in env
    assert f"NVIDIA_VISIBLE_DEVICES={device['uuid']}" in env


def test_sigkilled_agent_readopts_its_sessions(split_platform: Platform) -> None:
    plat = split_platform
    created = json.loads(plat.ok("session", "create", "--name", "keep", "--gpu", "0.5", *SMALL,
                                 "--count", "3", "--wait", "--json"))
    assert {s["status"] for s in created} == {"RUNNING"}
    before = containers_of(plat.node)
    assert set(before) == {s["id"] for s in created}

    agent = plat.processes.pop()
    agent.stop(signal.SIGKILL)
    plat.processes.append(start_agent(plat))
    plat.wait_next_heartbeat(2)  # reconcile passes of the new agent, reported

    assert containers_of(plat.node) == before  # the same containers, no duplicates
    listed = json.loads(plat.ok("session", "list", "--json"))["items"]
    assert {s["name"]: s["status"] for s in listed} == {
        "keep-1": "RUNNING", "keep-2": "RUNNING", "keep-3": "RUNNING"
    }
    assert "hi" in plat.ok("session", "exec", "keep-2", "--", "echo", "hi")


def test_a_container_killed_from_outside_ends_its_session_within_5_seconds(
    split_platform: Platform,
) -> None:
    plat = split_platform
    plat.ok("session", "create", "--name", "victim", *SMALL, "--wait")
    plat.ok("session", "create", "--name", "job", *SMALL, "--type", "batch",
            "--command", "sleep 300")
    victim = plat.wait_status("victim", {"RUNNING"})
    job = plat.wait_status("job", {"RUNNING"})
    containers = containers_of(plat.node)
    subprocess.run(["docker", "kill", containers[victim["id"]], containers[job["id"]]],
                   check=True, capture_output=True)
    started = time.monotonic()
    victim = plat.wait_status("victim", {"ERROR", "TERMINATED"}, timeout=5)
    job = plat.wait_status("job", {"ERROR", "TERMINATED"}, timeout=5)
    assert time.monotonic() - started < scaled(5)
    assert victim["status"] == "ERROR"
    assert "stopped unexpectedly with code 137 (killed by SIGKILL)" in victim["status_reason"]
    assert (job["status"], job["result"], job["exit_code"]) == ("TERMINATED", "FAILED", 137)
    # ended sessions leave no container behind
    wait_for(lambda: containers_of(plat.node) == {}, 30, "the ended sessions' containers gone")
