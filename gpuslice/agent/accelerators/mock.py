"""Simulated GPUs from the agent config, for machines without a GPU (CI, laptops).

Sessions on a mock device run on the CPU, but everything the platform controls (allocation,
env, labels, allocation.json, accounting) is exactly as on a real node. UUIDs are derived from
the node name and the device index, so they survive agent restarts and differ between nodes.

GPU load is simulated per process, deterministically: a process inside a session declares what
it holds (``gpuslice-mock-gpu --mem 1g --util 80``, which calls the in-session endpoint's
``POST /v1/mock/gpu``), and the device then reports that process with exactly that memory and
utilization, as NVML reports a real one, until the process ends or declares zero. The rest of
the agent cannot tell the difference: it maps the process to its session by cgroup, as on a
real GPU. Nothing of this exists on nodes with real GPUs.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuslice.agent.accelerators.base import Device, DeviceUsage, ProcessMemory, summarize
from gpuslice.agent.settings import MockGpu

_NAMESPACE = uuid.UUID("6f1c2a52-5d0e-4c47-9a52-6a7e0f1c9b11")


def mock_uuid(node_name: str, index: int) -> str:
    """``GPU-mock-<uuid5(node, index)>``: deterministic, unique per node and index."""
    return f"GPU-mock-{uuid.uuid5(_NAMESPACE, f'{node_name}/{index}')}"


@dataclass(frozen=True, slots=True)
class SimulatedLoad:
    """What one host process declared it holds on one simulated device."""

    pid: int
    started: str  # the process's start time (/proc/<pid>/stat): a reused pid is another process
    device_uuid: str
    memory: int  # bytes
    utilization: int  # percent of the device


class MockAccelerator:
    """Devices as configured by ``[[gpu]]`` tables; usage is what processes declared."""

    name = "mock"
    device_requests = False

    def __init__(
        self, node_name: str, gpus: Sequence[MockGpu], *, proc_root: Path = Path("/proc")
    ) -> None:
        devices: list[Device] = []
        for spec in gpus:
            for _ in range(spec.count):
                index = len(devices)
                devices.append(
                    Device(
                        index=index,
                        uuid=mock_uuid(node_name, index),
                        model=spec.model,
                        memory=spec.memory,
                        sms=spec.sms,
                    )
                )
        self._devices = devices
        self._proc_root = proc_root
        self._loads: dict[tuple[int, str], SimulatedLoad] = {}  # (pid, device uuid) -> load
        self._lock = threading.Lock()  # usage() runs in a worker thread

    def devices(self) -> list[Device]:
        return list(self._devices)

    def simulate(self, pid: int, device_uuid: str, memory: int, utilization: int) -> None:
        """Process ``pid`` holds ``memory`` bytes and keeps ``utilization`` % of the device busy
        from now on (both zero: it holds nothing). Raises ``ValueError`` for an unknown device,
        a process that does not exist, or amounts out of range."""
        device = next((d for d in self._devices if d.uuid == device_uuid), None)
        if device is None:
            raise ValueError(f"no simulated device {device_uuid} on this node")
        if not 0 <= memory <= device.memory:
            raise ValueError(f"memory must be 0 to {device.memory} bytes (the whole device)")
        if not 0 <= utilization <= 100:
            raise ValueError("utilization must be 0 to 100 (percent of the device)")
        started = self._started(pid)
        if started is None:
            raise ValueError(f"process {pid} does not exist")
        with self._lock:
            if memory == 0 and utilization == 0:
                self._loads.pop((pid, device_uuid), None)
            else:
                self._loads[(pid, device_uuid)] = SimulatedLoad(
                    pid, started, device_uuid, memory, utilization
                )

    def usage(self) -> list[DeviceUsage]:
        with self._lock:
            for key, load in list(self._loads.items()):
                if self._started(load.pid) != load.started:  # ended (or its pid reused)
                    del self._loads[key]
            loads = list(self._loads.values())
        readings = []
        for device in self._devices:
            mine = [load for load in loads if load.device_uuid == device.uuid]
            readings.append(
                DeviceUsage(
                    uuid=device.uuid,
                    utilization=min(100, sum(load.utilization for load in mine)),
                    memory_used=sum(load.memory for load in mine),
                    processes=tuple(
                        ProcessMemory(load.pid, device.uuid, load.memory) for load in mine
                    ),
                    process_utilization={load.pid: load.utilization for load in mine},
                )
            )
        return readings

    def describe(self) -> str:
        return f"mock: {summarize(self._devices)} simulated; sessions run on the CPU"

    def close(self) -> None:
        return None

    def _started(self, pid: int) -> str | None:
        try:
            stat = (self._proc_root / str(pid) / "stat").read_text()
        except OSError:
            return None
        # Field 22 (starttime) follows the command name, which may itself hold spaces.
        fields = stat.rsplit(")", 1)[-1].split()
        return fields[19] if len(fields) > 19 else None
