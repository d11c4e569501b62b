"""A stand-in for nvidia-ml-py (``pynvml``) for the agent's tests: it answers like NVML for
the GPUs it is given (dicts: uuid, name, total, sms, used, util, procs, samples…) and records
its calls; ``A100`` is one such GPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpuslice.common.resources import GiB


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
