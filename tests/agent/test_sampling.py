"""Per-session GPU figures: NVML per-process data (fake NVML) and the mock's simulated processes,
mapped to sessions by cgroup (fake /proc), averaged between heartbeats; the watchdog on a mock."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuslice.agent.accelerators import MockAccelerator, NvidiaAccelerator
from gpuslice.agent.sampling import GpuSampler, pid_sessions, session_figures
from gpuslice.agent.settings import MockGpu
from gpuslice.agent.watchdog import REASON, check
from gpuslice.common.resources import GiB, MiB
from gpuslice.common.schemas.agents import SessionGpuUsage

from .factories import container
from .fake_nvml import A100, FakeNVML

C1, C2 = "a" * 64, "b" * 64


def proc(root: Path, pid: int, cgroup: str, started: int = 1000) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "cgroup").write_text(cgroup)
    fields = ["S"] + ["0"] * 18 + [str(started)] + ["0"] * 20
    (root / str(pid) / "stat").write_text(f"{pid} (python3 -u x) " + " ".join(fields))


@pytest.fixture
def fake_proc(tmp_path: Path) -> Path:
    proc(tmp_path, 100, f"12:memory:/docker/{C1}\n")  # session "busy"
    proc(tmp_path, 101, f"12:memory:/docker/{C1}\n")  # a second process of "busy"
    proc(tmp_path, 200, f"0::/system.slice/docker-{C2}.scope\n")  # session "idle"
    proc(tmp_path, 300, "0::/user.slice/user-1000.slice/session-2.scope\n")  # the host's
    return tmp_path


def test_nvidia_reads_each_process_utilization_since_the_last_reading() -> None:
    gpu = {**A100, "procs": [(100, GiB)],
           "samples": [(100, 10, 40), (100, 20, 60), (300, 20, 90)]}
    nvml = FakeNVML([gpu, {**A100, "uuid": "GPU-b", "putil_error": 3}])
    plugin, _ = NvidiaAccelerator.open(nvml)
    assert plugin is not None
    first = plugin.usage()
    assert first[0].process_utilization == {100: 50, 300: 90}  # two samples of 100 averaged
    assert first[1].process_utilization is None  # not supported: unknown, never 0
    gpu["samples"].append((100, 30, 7))
    assert plugin.usage()[0].process_utilization == {100: 7}  # only samples after 20
    assert "putil 0 20" in nvml.calls
    assert plugin.usage()[0].process_utilization == {}  # NVML: none found = nobody worked


def test_each_session_gets_its_own_processes_figures_not_the_devices(fake_proc: Path) -> None:
    nvml = FakeNVML([{**A100, "used": 9 * GiB, "util": 97,
                      "procs": [(100, 3 * GiB), (101, GiB), (200, 0), (300, 5 * GiB)],
                      "samples": [(100, 5, 60), (101, 5, 30), (300, 5, 7)]}])
    plugin, _ = NvidiaAccelerator.open(nvml)
    assert plugin is not None
    busy = container("busy", C1, {"GPU-aaaa": 10 * GiB})
    idle = container("idle", C2, {"GPU-aaaa": 10 * GiB})
    cpu_only = container("cpu", "c" * 64, {})
    reading = GpuSampler(plugin, fake_proc).read([busy, idle, cpu_only])
    assert reading.pid_sessions == {100: "busy", 101: "busy", 200: "idle"}
    assert reading.sessions == {
        "busy": [SessionGpuUsage(uuid="GPU-aaaa", mem_used=4 * GiB, utilization=90)],
        "idle": [SessionGpuUsage(uuid="GPU-aaaa", mem_used=0, utilization=0)],
        "cpu": [],  # no GPU: nothing to measure (not unknown)
    }
    assert reading.devices[0].utilization == 97  # the device: everyone, the host included


def test_unknown_figures_stay_unknown(fake_proc: Path) -> None:
    nvml = FakeNVML([{**A100, "procs": [(100, None)], "putil_error": 3}])
    plugin, _ = NvidiaAccelerator.open(nvml)
    assert plugin is not None
    usage = plugin.usage()
    owners = pid_sessions(usage, [container("busy", C1, {})], fake_proc)
    figures = session_figures(usage, owners, {"busy": ["GPU-aaaa"], "other": ["GPU-gone"]})
    assert figures == {
        "busy": [SessionGpuUsage(uuid="GPU-aaaa", mem_used=None, utilization=None)],
        "other": [SessionGpuUsage(uuid="GPU-gone", mem_used=None, utilization=None)],
    }


def test_mock_processes_are_simulated_until_they_end(fake_proc: Path) -> None:
    mock = MockAccelerator("n", [MockGpu(memory="8g")], proc_root=fake_proc)
    [device] = mock.devices()
    mock.simulate(100, device.uuid, 2 * GiB, 80)
    mock.simulate(200, device.uuid, 256 * MiB, 0)
    [reading] = mock.usage()
    assert (reading.memory_used, reading.utilization) == (2 * GiB + 256 * MiB, 80)
    assert reading.process_utilization == {100: 80, 200: 0}
    owners = pid_sessions([reading], [container("busy", C1, {}), container("idle", C2, {})],
                          fake_proc)
    assert owners == {100: "busy", 200: "idle"}
    proc(fake_proc, 100, f"12:memory:/docker/{C1}\n", started=2000)  # ended, pid reused
    mock.simulate(200, device.uuid, 0, 0)  # declared zeros: holds nothing
    assert [(r.memory_used, r.processes) for r in mock.usage()] == [(0, ())]
    with pytest.raises(ValueError, match="does not exist"):
        mock.simulate(999, device.uuid, 1, 1)
    with pytest.raises(ValueError, match="0 to 100"):
        mock.simulate(100, device.uuid, 1, 101)
    with pytest.raises(ValueError, match="whole device"):
        mock.simulate(100, device.uuid, 9 * GiB, 1)
    with pytest.raises(ValueError, match="no simulated device"):
        mock.simulate(100, "GPU-other", 1, 1)


def test_heartbeats_average_utilization_over_the_readings_not_yet_sent(
    fake_proc: Path,
) -> None:
    mock = MockAccelerator("n", [MockGpu(memory="8g")], proc_root=fake_proc)
    uuid = mock.devices()[0].uuid
    busy = container("busy", C1, {uuid: 4 * GiB})
    sampler = GpuSampler(mock, fake_proc)
    for util in (90, 60):
        mock.simulate(100, uuid, GiB, util)
        sampler.read([busy])
    figures, marker = sampler.take()
    assert figures == {"busy": [SessionGpuUsage(uuid=uuid, mem_used=GiB, utilization=75)]}
    mock.simulate(100, uuid, 2 * GiB, 0)
    sampler.read([busy])
    assert sampler.take()[0]["busy"][0].utilization == 50  # the heartbeat was not sent
    sampler.sent(marker)
    assert sampler.take()[0] == {
        "busy": [SessionGpuUsage(uuid=uuid, mem_used=2 * GiB, utilization=0)]
    }


def test_the_watchdog_judges_simulated_processes_too(fake_proc: Path) -> None:
    mock = MockAccelerator("n", [MockGpu(memory="8g")], proc_root=fake_proc)
    uuid = mock.devices()[0].uuid
    mock.simulate(100, uuid, 3 * GiB, 10)
    mock.simulate(200, uuid, GiB, 10)
    slices = [container("busy", C1, {uuid: 2 * GiB}), container("idle", C2, {uuid: 2 * GiB})]
    [over] = check(mock.usage(), slices, proc_root=fake_proc)
    assert (over.session_id, over.used, over.limit, over.reason) == ("busy", 3 * GiB, 2 * GiB,
                                                                    REASON)


def test_a_session_lists_its_own_gpu_processes_with_the_pids_it_sees(fake_proc: Path) -> None:
    mock = MockAccelerator("n", [MockGpu(memory="8g")], proc_root=fake_proc)
    uuid = mock.devices()[0].uuid
    (fake_proc / "100" / "status").write_text("Name:\tpython3\nNSpid:\t100\t7\n")
    (fake_proc / "100" / "cmdline").write_bytes(b"/usr/bin/python3\0train.py\0")
    (fake_proc / "200" / "comm").write_text("java\n")  # no cmdline: a kernel name
    mock.simulate(100, uuid, GiB, 50)
    mock.simulate(200, uuid, 2 * GiB, 10)  # the other session's: never in busy's list
    sampler = GpuSampler(mock, fake_proc)
    sampler.read([container("busy", C1, {uuid: 4 * GiB}), container("idle", C2, {uuid: GiB})])
    assert sampler.processes("busy") == [
        {"pid": 7, "name": "/usr/bin/python3", "uuid": uuid, "used": GiB}  # its container's pid
    ]
    assert [(p["name"], p["used"]) for p in sampler.processes("idle")] == [("java", 2 * GiB)]
    assert sampler.processes("gone") == []
