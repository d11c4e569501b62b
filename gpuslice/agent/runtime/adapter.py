"""From the manager's assignment (the agent wire) to the runtime's :class:`SessionSpec` (pure).

The wire carries exact integers (milli-fGPU, milli-cores, bytes) and each slice's share of its
device as the manager computed it once (``common.resources.slice_fraction`` and
``sm_percent``). They are taken as they are: nothing is converted or recomputed here, so
``allocation.json`` and ``GPUSLICE_*`` state the very numbers the API shows.
"""

from __future__ import annotations

from gpuslice.agent.runtime.spec import GpuSlice, Mount, SessionSpec, SpecError
from gpuslice.common.schemas.agents import Assignment, SliceAssignment

#: A session without a GPU states a whole device as its node's unit (nothing depends on it).
NO_DEVICE_CAPACITY = 1000


def session_spec(assignment: Assignment, folders: tuple[Mount, ...] = ()) -> SessionSpec:
    """What the runtime needs to run ``assignment``; :class:`SpecError` if its slices disagree
    on the size of a device (one node has one fGPU per GPU). ``folders``: its storage folders,
    checked against this node's storage root (``runtime/folders.py``)."""
    return SessionSpec(
        session_id=assignment.session_id,
        owner=assignment.owner,
        image=assignment.image,
        type=assignment.type.value,
        cpu=assignment.resources.cpu,
        mem=assignment.resources.mem,
        command=tuple(assignment.command) if assignment.command else None,
        env=dict(assignment.env),
        slices=tuple(gpu_slice(s) for s in assignment.slices),
        device_capacity=_device_capacity(assignment.slices),
        folders=folders,
    )


def gpu_slice(wire: SliceAssignment) -> GpuSlice:
    """One device slice, with the manager's share of the device kept exactly."""
    return GpuSlice(
        device_uuid=wire.device_uuid,
        device_index=wire.device_index,
        gpu=wire.gpu,
        mem=wire.mem,
        sms=wire.sms,
        fraction=wire.fraction,
        sm_percent=wire.sm_percent,
    )


def _device_capacity(slices: list[SliceAssignment]) -> int:
    capacities = {s.capacity for s in slices}
    if len(capacities) > 1:
        raise SpecError(f"the slices disagree on a device's fGPU: {sorted(capacities)} milli-fGPU")
    return capacities.pop() if capacities else NO_DEVICE_CAPACITY
