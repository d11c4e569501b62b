"""Test data as the agent gets it: slices as the manager sends them (the share computed the
manager's way), a session's container as Docker reports it."""

from __future__ import annotations

from gpuslice.agent.runtime import GpuSlice
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.common.resources import slice_fraction, sm_percent


def gpu_slice(
    uuid: str, index: int, gpu: int, mem: int, sms: int, *, capacity: int = 1000
) -> GpuSlice:
    """``gpu`` milli-fGPU of a device of ``capacity`` milli-fGPU, with ``mem`` bytes and ``sms``
    SMs; its fraction and SM share from ``common.resources``, as the manager computes them."""
    return GpuSlice(
        uuid, index, gpu, mem, sms, slice_fraction(gpu, capacity), sm_percent(gpu, capacity)
    )


def container(session_id: str, container_id: str, uuids: dict[str, int]) -> ContainerState:
    """A running session's container, allocated ``uuids`` (device uuid: its memory bytes)."""
    return ContainerState(
        session_id=session_id, container_id=container_id, name=f"gpuslice-{session_id}",
        status="running", exit_code=None, oom_killed=False, error="", started_at="",
        finished_at="", owner="alice", session_type="interactive", node="n",
        allocation={"devices": [{"uuid": u, "index": 0, "memory_bytes": m}
                                for u, m in uuids.items()]},
    )
