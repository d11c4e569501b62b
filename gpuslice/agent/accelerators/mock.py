"""Simulated GPUs from the agent config, for machines without a GPU (CI, laptops).

Sessions on a mock device run on the CPU, but everything the platform controls (allocation,
env, labels, allocation.json, accounting) is exactly as on a real node. UUIDs are derived from
the node name and the device index, so they survive agent restarts and differ between nodes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from gpuslice.agent.accelerators.base import Device, DeviceUsage, summarize
from gpuslice.agent.config import MockGpu

_NAMESPACE = uuid.UUID("6f1c2a52-5d0e-4c47-9a52-6a7e0f1c9b11")


def mock_uuid(node_name: str, index: int) -> str:
    """``GPU-mock-<uuid5(node, index)>``: deterministic, unique per node and index."""
    return f"GPU-mock-{uuid.uuid5(_NAMESPACE, f'{node_name}/{index}')}"


class MockAccelerator:
    """Devices as configured by ``[[gpu]]`` tables; usage always reads idle."""

    name = "mock"
    device_requests = False

    def __init__(self, node_name: str, gpus: Sequence[MockGpu]) -> None:
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

    def devices(self) -> list[Device]:
        return list(self._devices)

    def usage(self) -> list[DeviceUsage]:
        # Sessions run on the CPU: a simulated device never holds memory or does work.
        return [DeviceUsage(uuid=d.uuid, utilization=0, memory_used=0) for d in self._devices]

    def describe(self) -> str:
        return f"mock: {summarize(self._devices)} simulated; sessions run on the CPU"

    def close(self) -> None:
        return None
