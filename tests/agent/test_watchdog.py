"""The GPU memory watchdog on a fake NVML reading and a fake /proc."""

from __future__ import annotations

from pathlib import Path

from gpuslice.agent.accelerators import DeviceUsage, NvidiaAccelerator, ProcessMemory
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.agent.watchdog import REASON, check, container_id_of_pid, find_overuse
from gpuslice.common.resources import GiB

from .fake_nvml import FakeNVML

C1 = "a" * 64
C2 = "b" * 64


def state(session_id: str, container_id: str, slices: dict[str, int]) -> ContainerState:
    return ContainerState(
        session_id=session_id,
        container_id=container_id,
        name=f"gpuslice-{session_id}",
        status="running",
        exit_code=None,
        oom_killed=False,
        error="",
        started_at="",
        finished_at="",
        owner="alice",
        session_type="interactive",
        node="n",
        allocation={"devices": [{"uuid": u, "memory_bytes": m} for u, m in slices.items()]},
    )


def fake_proc(root: Path, cgroups: dict[int, str]) -> Path:
    for pid, line in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(line)
    return root


def test_container_is_found_in_every_cgroup_layout(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        {
            1: f"12:memory:/docker/{C1}\n11:cpu:/docker/{C1}\n",  # v1, cgroupfs driver
            2: f"0::/system.slice/docker-{C2}.scope\n",  # v2, systemd driver
            3: "0::/user.slice/user-1000.slice/session-2.scope\n",  # a host process
        },
    )
    assert container_id_of_pid(1, proc) == C1
    assert container_id_of_pid(2, proc) == C2
    assert container_id_of_pid(3, proc) is None
    assert container_id_of_pid(99, proc) is None  # ended meanwhile


def test_session_over_its_slice_is_reported_with_the_reason(tmp_path: Path) -> None:
    nvml = FakeNVML(
        [
            {
                "uuid": "GPU-a",
                "name": "A100",
                "total": 40 * GiB,
                "sms": 108,
                # s1 holds 6 GiB in two processes against a 5 GiB slice; s2 stays inside.
                "procs": [(101, 4 * GiB), (102, 2 * GiB), (201, 5 * GiB), (301, 30 * GiB)],
            }
        ]
    )
    plugin, _ = NvidiaAccelerator.open(nvml)
    assert plugin is not None
    proc = fake_proc(
        tmp_path,
        {
            101: f"0::/docker/{C1}\n",
            102: f"0::/docker/{C1}\n",
            201: f"0::/docker/{C2}\n",
            301: "0::/init.scope\n",  # not a session: never stopped by the watchdog
        },
    )
    containers = [state("s1", C1, {"GPU-a": 5 * GiB}), state("s2", C2, {"GPU-a": 5 * GiB})]
    found = check(plugin.usage(), containers, proc_root=proc)
    assert [(o.session_id, o.device_uuid, o.used, o.limit) for o in found] == [
        ("s1", "GPU-a", 6 * GiB, 5 * GiB)
    ]
    assert found[0].reason == REASON == "exceeded its GPU memory slice"
    assert "6 GiB in use on GPU-a, slice 5 GiB" in found[0].detail
    assert check(plugin.usage(), containers, proc_root=proc, tolerance=GiB) == []


def test_memory_on_a_device_without_a_slice_counts_against_zero() -> None:
    usage = [DeviceUsage("GPU-b", 0, 1, (ProcessMemory(7, "GPU-b", 1),))]
    found = find_overuse(usage, {7: "s1"}, {"s1": {"GPU-a": 5 * GiB}})
    assert [(o.session_id, o.limit) for o in found] == [("s1", 0)]


def test_nothing_to_report_when_all_fit() -> None:
    usage = [DeviceUsage("GPU-a", 50, 5 * GiB, (ProcessMemory(7, "GPU-a", 5 * GiB),))]
    assert find_overuse(usage, {7: "s1"}, {"s1": {"GPU-a": 5 * GiB}}) == []
