"""Why a session waits, in words a user can act on: every PENDING reason is written here.

The core's (capacity, quotas, fifo, held capacity) are computed on the state at the end of a
pass; the manager's (a new session's, ``--begin``, a winner holding capacity, a preempted
session back in the queue) are put in words by the functions at the end of this module, which
the manager's services call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuslice.common.resources import Resources, format_cpu, format_fgpu, format_mem
from gpuslice.manager.scheduler.model import Quota, Request, WaitCode, groups_of
from gpuslice.manager.scheduler.state import ClusterState, GroupIndex, NodeState


@dataclass(slots=True)
class Usage:
    """A user's quota and what they use during a pass: their running sessions plus what the
    pass placed. Plain counters, added to in place on every placement."""

    quota: Quota = field(default_factory=Quota)
    sessions: int = 0
    gpu: int = 0  # milli-fGPU
    cpu: int = 0  # milli-cores
    mem: int = 0  # bytes

    models: dict[str, int] | None = None  # milli-fGPU per model part of ``quota.gpu_models``
    # whether ``quota`` limits sessions, fGPU, cpu or memory at all: a pass skips the check for
    # the (many) users without one
    limited: bool = False

    def __post_init__(self) -> None:
        q = self.quota
        self.limited = not (q.max_sessions is None and q.max_gpu is None and q.max_cpu is None
                            and q.max_mem is None)

    def add(self, res: Resources, model: str | None = None) -> None:
        self.sessions += 1
        self.gpu += res.gpu
        self.cpu += res.cpu
        self.mem += res.mem
        if model is not None and self.quota.gpu_models:
            models = self.models if self.models is not None else {}
            for part, _ in self.quota.gpu_models:
                if part in model.casefold():
                    models[part] = models.get(part, 0) + res.gpu
            self.models = models


def model_block(gpu: int, model: str, usage: Usage, whose: str) -> str | None:
    """The quota on GPUs of ``model`` that keeps a slice of ``gpu`` there from starting now."""
    held = usage.models or {}
    for part, limit in usage.quota.gpu_models:
        if part in model.casefold() and held.get(part, 0) + gpu > limit:
            return _over_quota(whose, held.get(part, 0), limit, gpu, format_fgpu,
                               f" fGPU of {part} GPUs")
    return None


# Which limit a request is over, what is in use, the limit and what it asks: kept by a pass
# for each request its quota holds back, and put in words only at its end (``quota_text``),
# once per distinct one (a pass may hold back tens of thousands, mostly alike).
QuotaOver = tuple[str, int, int, int]
_UNITS: dict[str, tuple[Callable[[int], str], str]] = {
    "gpu": (format_fgpu, " fGPU"), "cpu": (format_cpu, " CPU"), "mem": (format_mem, " of memory"),
}


def quota_over(want: Resources, user: Usage) -> QuotaOver | None:
    """The quota that keeps a request for ``want`` from starting now, or None if it allows it."""
    quota = user.quota
    if quota.max_sessions is not None and user.sessions + 1 > quota.max_sessions:
        return ("sessions", user.sessions, quota.max_sessions, 1)
    # plain comparisons first: this runs for every request a pass tries
    if quota.max_gpu is not None and user.gpu + want.gpu > quota.max_gpu:
        return ("gpu", user.gpu, quota.max_gpu, want.gpu)
    if quota.max_cpu is not None and user.cpu + want.cpu > quota.max_cpu:
        return ("cpu", user.cpu, quota.max_cpu, want.cpu)
    if quota.max_mem is not None and user.mem + want.mem > quota.max_mem:
        return ("mem", user.mem, quota.max_mem, want.mem)
    return None


def quota_words(project: str | None, over: QuotaOver) -> str:
    """``quota_over``'s answer for the user's quota (``project`` None) or a project's."""
    return quota_text("user quota" if project is None else f"project {project}", over)


def quota_text(whose: str, over: QuotaOver) -> str:
    """``quota_over``'s answer in words; ``whose`` names the quota ("user quota", "project
    vision")."""
    what, used, limit, asked = over
    if what == "sessions":
        return f"{whose}: {used} of {limit} sessions in use"
    fmt, unit = _UNITS[what]
    return _over_quota(whose, used, limit, asked, fmt, unit)


def capacity_reason(state: ClusterState, req: Request) -> tuple[WaitCode, str]:
    """Why nothing in the request's resource groups can take it now (naming the groups when
    they are other than the default one)."""
    code, text = _capacity_reason(state, req)
    if code is WaitCode.CAPACITY and groups_of(req) != ("default",):
        text += f" in {group_words(req)}"
    return code, text


def _capacity_reason(state: ClusterState, req: Request) -> tuple[WaitCode, str]:
    res = req.resources
    where = group_words(req)
    pool_nodes = state.nodes_for(req)
    if not pool_nodes:
        return WaitCode.NO_NODE, f"no schedulable node in {where}"
    silent = [ns.node.name for ns in pool_nodes if not ns.node.reported]
    if len(silent) == len(pool_nodes):
        return WaitCode.NO_NODE, unreported(where, silent)
    if res.gpu == 0 and not req.gpu_mem:
        return WaitCode.CAPACITY, _host_reason(res, pool_nodes, "")
    groups = state.groups_for(req)
    if not groups:
        pools = groups_of(req)
        models = sorted({k[1] for k in state.groups if k[0] in pools}) or ["none"]
        return WaitCode.NO_NODE, (
            f"no node in {where} has a GPU matching model '{req.gpu_model}' "
            f"(models here: {', '.join(models)})"
        )
    amounts = [(g, gpu) for g in groups if (gpu := g.gpu_of(req, state.step)) is not None]
    if not amounts:  # by GPU memory, more than any device here has
        largest = max(g.mem for g in groups)
        return WaitCode.NO_NODE, (
            f"needs {format_mem(req.gpu_mem)} of GPU memory on one GPU; the largest GPU in "
            f"{where} has {format_mem(largest)}"
        )
    singles = [(g, gpu) for g, gpu in amounts if g.kind(gpu) == 0]
    wholes = [(g, g.kind(gpu)) for g, gpu in amounts if g.kind(gpu) > 0]
    if singles:
        return WaitCode.CAPACITY, _slice_reason(state, req, singles)
    if wholes:
        return WaitCode.CAPACITY, _whole_reason(state, res, wholes)
    caps = sorted({format_fgpu(g.cap) for g in groups})
    return WaitCode.NO_NODE, (
        f"{format_fgpu(res.gpu)} fGPU is more than one GPU and not a whole number of GPUs "
        f"on any node in {where} (1 GPU = {' or '.join(caps)} fGPU)"
    )


def unreported(where: str, names: Sequence[str]) -> str:
    """Nodes of the request's groups have joined but none has said what it has yet."""
    shown = ", ".join(sorted(names)[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
    node = "node" if len(names) == 1 else "nodes"
    return (f"no node in {where} has reported its capacity yet: waiting for the first report "
            f"of {node} {shown}")


def group_words(req: Request) -> str:
    """The request's resource groups in words: "resource group 'a100'"."""
    pools = sorted(groups_of(req))
    if len(pools) == 1:
        return f"resource group '{pools[0]}'"
    return "resource groups " + ", ".join(f"'{p}'" for p in pools)


def _slice_reason(
    state: ClusterState, req: Request, groups: list[tuple[GroupIndex, int]]
) -> str:
    """``groups``: the groups that could hold the request on one device, with its slice there."""
    least = min(gpu for _, gpu in groups)
    need = f"needs {format_fgpu(least)} fGPU on one GPU"
    if req.gpu_mem:
        memory = format_mem(req.gpu_mem)
        need = f"needs {memory} of GPU memory ({format_fgpu(least)} fGPU) on one GPU"
    largest, where, fits = 0, "", False
    for group, gpu in groups:
        top = group.slices.largest()
        if top is None:
            continue
        amount, key = top
        fits = fits or amount >= gpu
        if amount > largest:
            largest = amount
            rank, pos = state.device_at(key)
            ns = state.nodes[rank]
            where = f" ({ns.node.name} GPU {ns.node.devices[pos].index})"
    if not fits:
        if largest == 0:
            return f"{need}; no GPU has a free slice"
        return f"{need}; the largest free slice is {format_fgpu(largest)} fGPU{where}"
    hosts = [
        ns for g, gpu in groups for ns in state.nodes_of(g)
        if any(ns.free[p] >= gpu and p not in ns.held for p in ns.positions(g))
    ]
    return _host_reason(req.resources, hosts, f"{need} and, on the same node, ")


def _whole_reason(
    state: ClusterState, res: Resources, groups: list[tuple[GroupIndex, int]]
) -> str:
    k = min(k for _, k in groups)
    need = f"needs {k} whole GPU{'s' if k > 1 else ''} on one node"
    most, where = 0, ""
    for group, _ in groups:
        top = group.whole.largest()
        if top is not None and top[0] > most:
            most, rank = top
            where = f" ({state.nodes[rank].node.name})"
    if all(most < kk for _, kk in groups):
        return f"{need}; the most entirely free GPUs on one node is {most}{where}"
    # the buckets know each node's entirely free devices: no walk over every node
    hosts = [state.nodes[rank] for g, kk in groups for rank in g.whole.keys_from(kk)]
    return _host_reason(res, hosts, f"{need} and, on the same node, ")


def _host_reason(res: Resources, hosts: list[NodeState], prefix: str) -> str:
    """Why none of ``hosts`` has the cpu/memory the request needs."""
    text = f"{prefix or 'needs '}{format_cpu(res.cpu)} CPU and {format_mem(res.mem)} of memory"
    if not hosts:
        return f"{text}; no node has room"
    cpu_best = max(hosts, key=lambda ns: (ns.cpu_free, -ns.rank))
    mem_best = max(hosts, key=lambda ns: (ns.mem_free, -ns.rank))
    short = []
    if cpu_best.cpu_free < res.cpu:
        short.append(f"{format_cpu(max(cpu_best.cpu_free, 0))} CPU ({cpu_best.node.name})")
    if mem_best.mem_free < res.mem:
        short.append(f"{format_mem(max(mem_best.mem_free, 0))} of memory ({mem_best.node.name})")
    if short:
        return f"{text}; the most free is {' and '.join(short)}"
    return f"{text}; no node has both free at once"


def _over_quota(
    whose: str, in_use: int, limit: int, asked: int, fmt: Callable[[int], str], unit: str
) -> str:
    return (
        f"{whose}: {fmt(in_use)} of {fmt(limit)}{unit} in use; "
        f"this session needs {fmt(asked)}{unit} more"
    )


def fifo_wait(ahead: int) -> str:
    """fifo: the request waits behind ``ahead`` earlier ones of its resource group."""
    return f"waiting behind {ahead} earlier session{'s' if ahead != 1 else ''} (fifo)"


def held_for_it(node: str, gpus: Sequence[int], free_in: float | None) -> str:
    """backfill: appended to the reason of a request capacity is held for, on ``node`` (its
    GPUs ``gpus``; none: cpu and memory only), expected to be enough in ``free_in`` seconds
    (None: not known)."""
    where = node + (f" GPU {', '.join(str(i) for i in gpus)}" if gpus else "")
    if free_in is None:
        return f"; capacity on {where} is held for it"
    return f"; capacity on {where} is held for it, expected to be free in {_duration(free_in)}"


# backfill: appended to the reason of the others of a resource group where capacity is held
HELD_AHEAD = ("; some capacity is held for sessions ahead of it (a session whose time limit "
              "ends before that capacity is needed may use it)")

# ------------------------------------------------------------ the manager's words

# A session just created, until a pass has looked at it.
QUEUED = "waiting for the scheduler"


def begin_reason(begin_at: datetime, now: datetime) -> str:
    """``starts at 22:00 UTC, as asked`` (the day too when it is not today). No countdown:
    the reason stays the same from pass to pass, so waiting costs no write per pass (the
    CLI and the console show the time left from ``begin_at``)."""
    at = begin_at.astimezone(UTC)
    when = at.strftime("%H:%M UTC") if at.date() == now.astimezone(UTC).date() else (
        at.strftime("%Y-%m-%d %H:%M UTC"))
    return f"starts at {when}, as asked"


def preempting(node_name: str) -> str:
    """A winner's reason while its victims stop."""
    return (f"preempting lower-priority sessions on node {node_name}: waiting for them to "
            "stop; their capacity is held for it")


def requeued(stop_reason: str) -> str:
    """A preempted session whose container is gone, back in the queue (``stop_reason``: why it
    was stopped)."""
    return f"{stop_reason}; back in the queue in its place"


def after_preemption(preempt_reason: str | None, reason: str) -> str:
    """A PENDING session's reason: after a preemption, why it is back in the queue first."""
    if preempt_reason:
        return f"{preempt_reason}; back in the queue: {reason}"
    return reason


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
