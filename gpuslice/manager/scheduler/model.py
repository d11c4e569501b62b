"""The scheduler core's inputs and outputs: plain data, no I/O.

All amounts are exact integers (see ``gpuslice.common.resources``): gpu and cpu in milli-units,
memory in bytes. A device's fGPU capacity is ``node.device_capacity`` (``fgpu_per_gpu * 1000``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpuslice.common.resources import Resources, gpu_for_memory, slice_share


class Policy(StrEnum):
    FIFO = "fifo"
    BACKFILL = "backfill"
    DRF = "drf"


class Strategy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"


class WaitCode(StrEnum):
    """Why a request is still PENDING (stable codes for APIs; the reason text is for people)."""

    CAPACITY = "capacity"  # no node has room for it now
    QUOTA = "quota"  # its user's (or its project's) quota is used up
    FIFO = "fifo"  # an earlier request in its pool waits for capacity (fifo)
    RESERVED = "reserved"  # capacity it could use is held for a request waiting longer
    NO_NODE = "no_node"  # no schedulable node matches (pool, GPU model) at all
    BEGIN = "begin"  # asked to start later (``--begin``); set by the manager, not the core
    PREEMPTING = "preempting"  # lower-priority sessions are stopping for it; capacity held


@dataclass(slots=True)
class Device:
    """One physical GPU on a node and how much of it is allocated (milli-fGPU)."""

    index: int
    uuid: str
    model: str
    mem: int  # bytes
    sms: int = 0
    used: int = 0  # milli-fGPU allocated


@dataclass(frozen=True, slots=True)
class Running:
    """An allocation on a node and when it ends at the latest: its time limit (``ends_at``,
    on the clock of ``now``; ``None``: no limit, it may run for ever). Backfill reads these to
    know when held capacity will be free."""

    ends_at: float | None
    cpu: int  # milli-cores
    mem: int  # bytes
    slices: tuple[tuple[int, int], ...] = ()  # (device index, milli-fGPU)


@dataclass(slots=True)
class Node:
    """A schedulable node: capacity, what is allocated, and its devices."""

    id: str
    name: str
    cpu: int  # milli-cores
    mem: int  # bytes
    devices: list[Device] = field(default_factory=list)
    device_capacity: int = 1000  # one device in milli-fGPU: fgpu_per_gpu * 1000
    cpu_used: int = 0
    mem_used: int = 0
    pool: str = "default"
    running: tuple[Running, ...] = ()  # what is allocated, with end times (backfill only)

    @property
    def reported(self) -> bool:
        """Whether the node has said what it has: a node that registered has no capacity
        until its agent's first report (a node with nothing at all is treated alike)."""
        return self.cpu > 0 or self.mem > 0 or bool(self.devices)


@dataclass(frozen=True, slots=True)
class Quota:
    """A user's (or project's) limits; ``None`` means unlimited. ``gpu_models``: (model part,
    casefolded; milli-fGPU) pairs: at most that much on GPUs whose model contains the part."""

    max_sessions: int | None = None
    max_gpu: int | None = None  # milli-fGPU
    max_cpu: int | None = None  # milli-cores
    max_mem: int | None = None  # bytes
    gpu_models: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class UserState:
    """A user's (or project's) quota and what their running (allocated) sessions use now;
    ``used_models``: milli-fGPU held on GPUs of each of the quota's ``gpu_models`` parts."""

    quota: Quota = field(default_factory=Quota)
    sessions: int = 0
    used: Resources = field(default_factory=Resources)
    used_models: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """One PENDING session asking for resources.

    ``enqueued_at`` is seconds since the epoch (or any monotonic clock shared with ``now``).
    ``gpu_mem`` > 0 asks by GPU memory instead of fGPU (``resources.gpu`` is then 0): on the
    device chosen, the smallest slice in the cluster's fGPU step whose memory is at least
    that (``common.resources.gpu_for_memory``); such a request is for one device.
    """

    id: str
    user: str
    resources: Resources
    enqueued_at: float
    priority: int = 0
    gpu_model: str | None = None
    pool: str = "default"
    gpu_mem: int = 0  # bytes of GPU memory on one device; 0: ``resources.gpu`` says the slice
    # The project it runs in (its name, a key of ``schedule``'s ``projects``); None: none.
    project: str | None = None
    # The resource groups (pools) it may run in when more than one: None means ``pool`` alone.
    # ``pool`` then names its queue (fifo and positions); see ``groups_of``.
    pools: frozenset[str] | None = None
    time_limit: float | None = None  # seconds it may run once started; None: no limit


@dataclass(frozen=True, slots=True)
class DeviceSlice:
    """The part of one device a placement takes."""

    index: int
    uuid: str
    gpu: int  # milli-fGPU
    mem: int  # bytes of device memory (rounded down)
    sms: int  # SMs (rounded down)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request starts. ``resources.gpu`` is the slice it got (for a request by GPU
    memory, the amount chosen on that device)."""

    request_id: str
    node_id: str
    resources: Resources
    slices: tuple[DeviceSlice, ...]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request left PENDING: why (for people and as a code) and its 1-based queue position."""

    request_id: str
    code: WaitCode
    reason: str
    position: int


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    policy: Policy = Policy.FIFO
    strategy: Strategy = Strategy.BINPACK
    max_wait_before_reserve: float = 600.0  # seconds (backfill only)
    max_reservations: int = 16  # requests that may hold capacity in one pass (backfill only)
    # backfill: the first request of each pool that does not fit holds capacity at once, not
    # only after ``max_wait_before_reserve`` (else a stream of small jobs starves it)
    reserve_head: bool = True
    fgpu_step: int = 10  # milli-fGPU: requests by GPU memory get a multiple of it (0.01 fGPU)


@dataclass(slots=True)
class PassResult:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)


def groups_of(req: Request) -> frozenset[str] | tuple[str]:
    """The resource groups (pools) ``req`` may run in."""
    return (req.pool,) if req.pools is None else req.pools


def request_gpu(req: Request, device_mem: int, device_capacity: int, step: int) -> int | None:
    """The slice ``req`` needs on a device of ``device_mem`` bytes (``None``: too small)."""
    if req.gpu_mem <= 0:
        return req.resources.gpu
    return gpu_for_memory(req.gpu_mem, device_mem, device_capacity, step)


def copy_node(node: Node) -> Node:
    """A copy of ``node`` whose devices may be changed without changing the original's."""
    return replace(node, devices=[replace(d) for d in node.devices])


def make_slice(node: Node, device: Device, gpu: int) -> DeviceSlice:
    """The slice of ``gpu`` milli-fGPU on ``device``, with its share of memory and SMs."""
    cap = node.device_capacity
    return DeviceSlice(
        device.index, device.uuid, gpu, slice_share(device.mem, gpu, cap),
        slice_share(device.sms, gpu, cap),
    )
