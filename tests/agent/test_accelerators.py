"""Accelerator plugins: mock from the config, nvidia through a stand-in NVML module, detect()."""

from __future__ import annotations

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
from tests.agent.fake_nvml import A100, FakeNVML


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
