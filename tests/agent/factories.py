"""Test data as the manager would send it: slices with the share computed the manager's way."""

from __future__ import annotations

from gpuslice.agent.runtime import GpuSlice
from gpuslice.common.resources import slice_fraction, sm_percent


def gpu_slice(
    uuid: str, index: int, gpu: int, mem: int, sms: int, *, capacity: int = 1000
) -> GpuSlice:
    """``gpu`` milli-fGPU of a device of ``capacity`` milli-fGPU, with ``mem`` bytes and ``sms``
    SMs; its fraction and SM share from ``common.resources``, as the manager computes them."""
    return GpuSlice(
        uuid, index, gpu, mem, sms, slice_fraction(gpu, capacity), sm_percent(gpu, capacity)
    )
