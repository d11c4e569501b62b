"""Accelerator plugins: ``nvidia`` (NVML) and ``mock`` (simulated GPUs), and picking one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuslice.agent.accelerators.base import (
    Accelerator,
    AcceleratorError,
    Device,
    DeviceUsage,
    ProcessMemory,
)
from gpuslice.agent.accelerators.mock import MockAccelerator, mock_uuid
from gpuslice.agent.accelerators.nvidia import NvidiaAccelerator
from gpuslice.agent.settings import AgentSettings

__all__ = [
    "Accelerator",
    "AcceleratorError",
    "Detection",
    "Device",
    "DeviceUsage",
    "MockAccelerator",
    "NvidiaAccelerator",
    "ProcessMemory",
    "detect",
    "mock_uuid",
]


@dataclass(frozen=True, slots=True)
class Detection:
    """The plugin in use and the line the agent prints at start to say so."""

    accelerator: Accelerator
    message: str


def detect(settings: AgentSettings, *, nvml: Any | None = None) -> Detection:
    """Pick the plugin: ``nvidia`` when NVML finds GPUs (or is required), else ``mock``.

    ``accelerator = "nvidia"`` in the config fails loudly when NVML finds nothing, rather
    than quietly running a GPU node as a simulated one.
    """
    if settings.accelerator in ("auto", "nvidia"):
        plugin, why_not = NvidiaAccelerator.open(nvml)
        if plugin is not None:
            return Detection(plugin, f"accelerator {plugin.describe()}")
        if settings.accelerator == "nvidia":
            raise AcceleratorError(f"accelerator = nvidia, but {why_not}")
        mock = MockAccelerator(settings.node_name, settings.gpu)
        return Detection(mock, f"accelerator {mock.describe()} (nvidia not used: {why_not})")
    mock = MockAccelerator(settings.node_name, settings.gpu)
    return Detection(mock, f"accelerator {mock.describe()} (accelerator = mock in the config)")
