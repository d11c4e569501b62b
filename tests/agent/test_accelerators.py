"""Accelerator plugins: mock from the config, nvidia through a stand-in NVML module, detect()."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpuslice.agent.accelerators import (
    AcceleratorError,
    MockAccelerator,
    NvidiaAccelerator,
    ProcessMemory,
    detect,
    mock_uuid,
)
from gpuslice.agent.settings import AgentSettings, MockGpu
from gpuslice.common.resources import GiB, MiB


class FakeNVMLError(Exception):
    """An NVML error; ``value`` is its code, as nvidia-ml-py's ``NVMLError`` has it."""

    def __init__(self, value: object = None) -> None:
        super().__init__(value)
        self.value = value


class FakeNVML:
    """Records calls and answers like nvidia-ml-py for the GPUs it is given."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6

    def __init__(self, gpus: list[dict[str, Any]], *, init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[str] = []

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str | bytes:
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetName(self, h: int) -> str | bytes:
        return self.gpus[h]["name"]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        gpu = self.gpus[h]
        return SimpleNamespace(total=gpu["total"], used=gpu.get("used", 0), free=0)

    def nvmlDeviceGetAttributes(self, h: int) -> SimpleNamespace:
        if "sms" not in self.gpus[h]:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(multiprocessorCount=self.gpus[h]["sms"])

    def nvmlDeviceGetNumGpuCores(self, h: int) -> int:
        return self.gpus[h]["cores"]

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self.gpus[h]["cc"]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.gpus[h].get("util", 0), memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in self.gpus[h].get("procs", [])
        ]

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[SimpleNamespace]:
        """``samples``: (pid, timestamp µs, SM %); only those newer than ``since``, as NVML.
        ``putil_error``: the error code NVML raises instead (6 not found, 3 not supported)."""
        self.calls.append(f"putil {h} {since}")
        if "putil_error" in self.gpus[h]:
            raise FakeNVMLError(self.gpus[h]["putil_error"])
        samples = [
            SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, ts, sm in self.gpus[h].get("samples", []) if ts > since
        ]
        if not samples:
            raise FakeNVMLError(self.NVML_ERROR_NOT_FOUND)
        return samples


A100 = {"uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-40GB", "total": 40 * GiB, "sms": 108}


def test_mock_devices_come_from_the_config_with_stable_uuids() -> None:
    gpus = [MockGpu(model="Mock A100", memory=8 * GiB, sms=108, count=2), MockGpu(model="T")]
    first = MockAccelerator("node-a", gpus).devices()
    assert [(d.index, d.model, d.memory, d.sms) for d in first] == [
        (0, "Mock A100", 8 * GiB, 108),
        (1, "Mock A100", 8 * GiB, 108),
        (2, "T", 8 * GiB, 108),
    ]
    assert [d.uuid for d in first] == [d.uuid for d in MockAccelerator("node-a", gpus).devices()]
    assert all(d.uuid.startswith("GPU-mock-") for d in first)
    assert len({d.uuid for d in first}) == 3
    assert mock_uuid("node-a", 0) != mock_uuid("node-b", 0)


def test_mock_usage_reads_idle_and_names_itself() -> None:
    mock = MockAccelerator("n", [MockGpu(count=2)])
    assert [(u.utilization, u.memory_used, u.processes) for u in mock.usage()] == [(0, 0, ())] * 2
    assert mock.name == "mock" and not mock.device_requests
    assert "sessions run on the CPU" in mock.describe()


def test_nvidia_lists_devices_and_usage_from_nvml() -> None:
    nvml = FakeNVML(
        [
            {**A100, "used": 5 * GiB, "util": 37, "procs": [(4242, 3 * GiB), (4343, None)]},
            {
                "uuid": b"GPU-bbbb",
                "name": b"Tesla T4",
                "total": 16 * GiB,
                "cores": 2560,
                "cc": (7, 5),
            },
        ]
    )
    plugin, why_not = NvidiaAccelerator.open(nvml)
    assert plugin is not None and why_not == ""
    devices = plugin.devices()
    assert [(d.index, d.uuid, d.model, d.memory, d.sms) for d in devices] == [
        (0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB", 40 * GiB, 108),
        (1, "GPU-bbbb", "Tesla T4", 16 * GiB, 40),  # 2560 cores / 64 per SM on Turing
    ]
    usage = plugin.usage()
    assert (usage[0].utilization, usage[0].memory_used) == (37, 5 * GiB)
    assert usage[0].processes == (
        ProcessMemory(pid=4242, device_uuid="GPU-aaaa", used=3 * GiB),
        ProcessMemory(pid=4343, device_uuid="GPU-aaaa", used=None),  # NVML could not tell
    )
    assert plugin.device_requests and plugin.name == "nvidia"
    plugin.close()
    plugin.close()
    assert [c for c in nvml.calls if not c.startswith("putil")] == ["init", "shutdown"]


def test_nvidia_declines_without_driver_or_gpus() -> None:
    plugin, why_not = NvidiaAccelerator.open(FakeNVML([], init_error="Driver Not Loaded"))
    assert plugin is None and "Driver Not Loaded" in why_not
    empty = FakeNVML([])
    plugin, why_not = NvidiaAccelerator.open(empty)
    assert plugin is None and why_not == "NVML found no GPU"
    assert empty.calls == ["init", "shutdown"]


def test_detect_prefers_nvidia_when_nvml_finds_gpus() -> None:
    found = detect(AgentSettings(node_name="n"), nvml=FakeNVML([A100]))
    assert found.accelerator.name == "nvidia"
    assert found.message.startswith("accelerator nvidia: 1 × NVIDIA A100-SXM4-40GB (40 GiB")


def test_detect_falls_back_to_mock_and_says_why() -> None:
    settings = AgentSettings(
        node_name="n", gpu=[{"model": "Mock A100", "memory": "8GiB", "count": 2}]
    )
    found = detect(settings, nvml=FakeNVML([], init_error="NVML Shared Library Not Found"))
    assert found.accelerator.name == "mock"
    assert len(found.accelerator.devices()) == 2
    assert "2 × Mock A100 (8 GiB, 108 SMs) simulated" in found.message
    assert "NVML Shared Library Not Found" in found.message


def test_detect_mock_when_configured_even_with_gpus() -> None:
    nvml = FakeNVML([A100])
    found = detect(AgentSettings(node_name="n", accelerator="mock"), nvml=nvml)
    assert found.accelerator.name == "mock"
    assert nvml.calls == []  # NVML is not even initialized


def test_detect_nvidia_required_but_missing_is_an_error() -> None:
    with pytest.raises(AcceleratorError, match="accelerator = nvidia, but NVML found no GPU"):
        detect(AgentSettings(node_name="n", accelerator="nvidia"), nvml=FakeNVML([]))


def test_usage_memory_is_exact_bytes() -> None:
    nvml = FakeNVML([{**A100, "used": 123 * MiB + 1}])
    plugin, _ = NvidiaAccelerator.open(nvml)
    assert plugin is not None
    assert plugin.usage()[0].memory_used == 123 * MiB + 1
