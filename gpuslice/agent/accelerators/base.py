"""What every accelerator plugin offers: its devices, and how busy they are now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpuslice.common.resources import format_mem


class AcceleratorError(RuntimeError):
    """An accelerator the config asks for cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU as the scheduler sees it. ``index`` is the node-local ordinal (NVML order)."""

    index: int
    uuid: str
    model: str
    memory: int  # bytes
    sms: int


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """GPU memory one host process holds on one device (NVML's compute processes)."""

    pid: int
    device_uuid: str
    used: int | None  # bytes; None where NVML cannot say (NVML_VALUE_NOT_AVAILABLE)


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """A device's measured load: percent busy, bytes in use, and who holds the memory.

    ``process_utilization`` is each process's share of the SMs (percent of the device) since the
    previous reading; a process missing from it did no work. ``None``: the device cannot say
    (per-process utilization is unknown, never zero).
    """

    uuid: str
    utilization: int  # percent, 0..100
    memory_used: int  # bytes
    processes: tuple[ProcessMemory, ...] = field(default_factory=tuple)
    process_utilization: Mapping[int, int] | None = None


class Accelerator(Protocol):
    """A source of devices. ``name`` is the plugin (``nvidia`` or ``mock``)."""

    name: str
    #: Whether containers get Docker device requests for their devices (only real GPUs do).
    device_requests: bool

    def devices(self) -> list[Device]:
        """The node's devices, in index order. Stable for the life of the process."""
        ...

    def usage(self) -> list[DeviceUsage]:
        """A reading of every device now."""
        ...

    def describe(self) -> str:
        """One line for the agent's start message."""
        ...

    def close(self) -> None:
        """Release the driver handle (idempotent)."""
        ...


def summarize(devices: list[Device]) -> str:
    """``2 × Mock A100 (8 GiB, 108 SMs)`` style summary; one group per distinct model."""
    if not devices:
        return "no GPUs"
    groups: dict[tuple[str, int, int], int] = {}
    for dev in devices:
        key = (dev.model, dev.memory, dev.sms)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(
        f"{count} × {model} ({format_mem(mem)}, {sms} SMs)"
        for (model, mem, sms), count in groups.items()
    )
