"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml`` only when needed).

The plugin takes the NVML module as an argument so tests can hand it a stand-in object; the
agent uses :meth:`NvidiaAccelerator.open`, which returns ``None`` (with the reason) when NVML is
missing, fails to initialize, or finds no GPU.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from gpuslice.agent.accelerators.base import Device, DeviceUsage, ProcessMemory, summarize

# CUDA cores per SM by compute capability, for drivers whose NVML cannot report SM counts of
# full (non-MIG) devices. Keys are (major, minor); a major alone matches every minor.
_CORES_PER_SM: dict[tuple[int, int] | int, int] = {
    (6, 0): 64,
    6: 128,
    7: 64,
    (8, 0): 64,
    8: 128,
    9: 128,
    10: 128,
    12: 128,
}


class NvidiaAccelerator:
    """Real GPUs. Device handles are looked up once; readings are taken on every call."""

    name = "nvidia"
    device_requests = True

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._closed = False
        count = nvml.nvmlDeviceGetCount()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._devices = [self._read_device(i, h) for i, h in enumerate(self._handles)]
        # Per device, the newest per-process utilization sample seen (NVML's CPU timestamp, µs):
        # the next reading asks only for samples after it.
        self._last_seen: dict[str, int] = {}

    @classmethod
    def open(cls, nvml: Any | None = None) -> tuple[NvidiaAccelerator | None, str]:
        """Initialize NVML; ``(plugin, "")`` when it finds GPUs, else ``(None, why not)``."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                return None, f"nvidia-ml-py is not installed ({exc})"
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            return None, f"NVML did not initialize: {exc}"
        try:
            plugin = cls(nvml)
        except Exception as exc:
            _shutdown(nvml)
            return None, f"NVML failed to list devices: {exc}"
        if not plugin.devices():
            plugin.close()
            return None, "NVML found no GPU"
        return plugin, ""

    def devices(self) -> list[Device]:
        return list(self._devices)

    def usage(self) -> list[DeviceUsage]:
        nvml = self._nvml
        readings = []
        for dev, handle in zip(self._devices, self._handles, strict=True):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except nvml.NVMLError:
                utilization = 0  # not supported on every device (e.g. some MIG setups)
            processes = tuple(
                ProcessMemory(pid=int(p.pid), device_uuid=dev.uuid, used=_bytes(p.usedGpuMemory))
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            )
            readings.append(
                DeviceUsage(
                    uuid=dev.uuid,
                    utilization=utilization,
                    memory_used=int(memory.used),
                    processes=processes,
                    process_utilization=self._process_utilization(dev.uuid, handle),
                )
            )
        return readings

    def _process_utilization(self, uuid: str, handle: Any) -> dict[int, int] | None:
        """Each process's SM utilization (percent of the device) since the previous reading.

        NVML keeps a short buffer of samples and returns those newer than the timestamp asked
        for, one per process that did some work: several samples of one process are averaged,
        a process without any did none (0). "Not found" means no process worked at all; "not
        supported" (older GPUs, some vGPU/MIG setups) means it cannot be known (``None``).
        """
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(uuid, 0))
        except nvml.NVMLError as exc:
            if _is_not_found(nvml, exc):
                return {}
            return None
        except AttributeError:  # a stand-in or a binding without the call
            return None
        per_pid: dict[int, list[int]] = {}
        newest = self._last_seen.get(uuid, 0)
        for sample in samples:
            per_pid.setdefault(int(sample.pid), []).append(min(100, int(sample.smUtil)))
            newest = max(newest, int(sample.timeStamp))
        self._last_seen[uuid] = newest
        return {pid: sum(values) // len(values) for pid, values in per_pid.items()}

    def describe(self) -> str:
        return f"nvidia: {summarize(self._devices)} via NVML"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _shutdown(self._nvml)

    def _read_device(self, index: int, handle: Any) -> Device:
        nvml = self._nvml
        return Device(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            model=_text(nvml.nvmlDeviceGetName(handle)),
            memory=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            sms=self._sm_count(handle),
        )

    def _sm_count(self, handle: Any) -> int:
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
        except (nvml.NVMLError, AttributeError):
            pass
        try:
            cores = int(nvml.nvmlDeviceGetNumGpuCores(handle))
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        except (nvml.NVMLError, AttributeError):
            return 0
        per_sm = _CORES_PER_SM.get((major, minor)) or _CORES_PER_SM.get(major)
        return cores // per_sm if per_sm else 0


def _bytes(value: object) -> int | None:
    # usedGpuMemory is None when NVML cannot attribute memory (NVML_VALUE_NOT_AVAILABLE, e.g.
    # a driver without access to the process's PID namespace): unknown, not zero.
    return int(value) if isinstance(value, int) else None


def _is_not_found(nvml: Any, exc: Exception) -> bool:
    not_found = getattr(nvml, "NVMLError_NotFound", None)
    if isinstance(not_found, type) and isinstance(exc, not_found):
        return True
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_FOUND", 6)


def _text(value: str | bytes) -> str:
    # nvidia-ml-py returns str; old releases returned bytes.
    return value.decode() if isinstance(value, bytes) else value


def _shutdown(nvml: ModuleType | Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down a half-initialized library must not mask the cause
        pass
