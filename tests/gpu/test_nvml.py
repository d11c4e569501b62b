"""NVML on a real GPU: discovery, a process's own memory and utilization, the watchdog's
decision on them (no Docker: the process is mapped to a "session" by pid)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from gpuslice.agent.accelerators import DeviceUsage, NvidiaAccelerator, detect
from gpuslice.agent.sampling import session_figures
from gpuslice.agent.settings import AgentSettings
from gpuslice.agent.watchdog import find_overuse
from tests.waits import scaled

from .conftest import Gpu

GiB = 1024**3


def test_nvml_finds_the_gpu_and_the_agent_picks_nvidia(gpu: Gpu) -> None:
    plugin, why_not = NvidiaAccelerator.open()
    assert plugin is not None, why_not
    try:
        [first, *_rest] = plugin.devices()
        assert (first.index, first.uuid, first.model, first.memory) == (
            0, gpu.uuid, gpu.name, gpu.memory)
        assert first.uuid.startswith(("GPU-", "MIG-")) and first.sms > 0
    finally:
        plugin.close()
    found = detect(AgentSettings(node_name="gpu-test", accelerator="auto"))
    try:
        assert found.accelerator.name == "nvidia" and gpu.name in found.message
    finally:
        found.accelerator.close()


@pytest.fixture
def reading(gpu: Gpu, gpu_child: subprocess.Popen[str]) -> Iterator[DeviceUsage]:
    """Device 0 read by the agent's plugin while ``gpu_child`` holds memory and computes."""
    plugin, why_not = NvidiaAccelerator.open()
    assert plugin is not None, why_not
    try:
        yield _reading_with(plugin, gpu_child.pid)
    finally:
        plugin.close()


def test_a_process_own_memory_and_utilization(
    gpu: Gpu, gpu_child: subprocess.Popen[str], reading: DeviceUsage
) -> None:
    mine = [p for p in reading.processes if p.pid == gpu_child.pid]
    assert mine and mine[0].used is not None and mine[0].used >= GiB  # its 1 GiB, at least
    figures = session_figures([reading], {gpu_child.pid: "s1"}, {"s1": [gpu.uuid],
                                                                "idle": [gpu.uuid]})
    [busy], [idle] = figures["s1"], figures["idle"]
    assert busy.mem_used is not None and busy.mem_used >= GiB
    assert idle.mem_used == 0  # a session with no process on the GPU: its own figures
    if reading.process_utilization is None:
        pytest.skip(f"{gpu.name}: NVML has no per-process utilization here (unknown, never "
                    "0: reported as null)")
    assert busy.utilization is not None and busy.utilization > 0
    assert idle.utilization == 0


def test_the_watchdog_judges_the_process_against_its_slice(
    gpu: Gpu, gpu_child: subprocess.Popen[str], reading: DeviceUsage
) -> None:
    owners = {gpu_child.pid: "s1"}
    [over] = find_overuse([reading], owners, {"s1": {gpu.uuid: 256 * 1024**2}})
    assert over.session_id == "s1" and over.used >= GiB
    assert find_overuse([reading], owners, {"s1": {gpu.uuid: 8 * GiB}}) == []


def _reading_with(plugin: NvidiaAccelerator, pid: int, timeout: float = 30) -> DeviceUsage:
    """The device-0 reading once NVML lists ``pid`` (and, where it can, its utilization)."""
    deadline = time.monotonic() + scaled(timeout)
    seen: list[int] = []
    while True:
        reading = plugin.usage()[0]
        seen = [p.pid for p in reading.processes]
        busy = reading.process_utilization
        if pid in seen and (busy is None or busy.get(pid, 0) > 0):
            return reading
        if time.monotonic() > deadline:
            if pid not in seen and seen:
                pytest.skip(f"NVML lists PIDs {seen}, not {pid}: this test runs in a PID "
                            "namespace other than the driver's (run it on the host)")
            raise AssertionError(f"NVML never showed process {pid} working: {reading}")
        time.sleep(0.5)
