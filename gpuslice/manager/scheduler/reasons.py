"""Why a request waits, in words a user can act on. Computed on the state at the end of a pass."""

from __future__ import annotations

from gpuslice.common.resources import Resources, format_cpu, format_fgpu, format_mem
from gpuslice.manager.scheduler.model import Request, UserState, WaitCode
from gpuslice.manager.scheduler.state import ClusterState, GroupIndex, NodeState


def quota_block(want: Resources, user: UserState) -> str | None:
    """The quota that keeps a request for ``want`` from starting now, or None if its user's
    quota allows it."""
    quota, used = user.quota, user.used
    if quota.max_sessions is not None and user.sessions + 1 > quota.max_sessions:
        return f"user quota: {user.sessions} of {quota.max_sessions} sessions in use"
    checks = (
        (quota.max_gpu, used.gpu, want.gpu, format_fgpu, " fGPU"),
        (quota.max_cpu, used.cpu, want.cpu, format_cpu, " CPU"),
        (quota.max_mem, used.mem, want.mem, format_mem, " of memory"),
    )
    for limit, in_use, asked, fmt, unit in checks:
        if limit is not None and in_use + asked > limit:
            return (
                f"user quota: {fmt(in_use)} of {fmt(limit)}{unit} in use; "
                f"this session needs {fmt(asked)}{unit} more"
            )
    return None


def capacity_reason(state: ClusterState, req: Request) -> tuple[WaitCode, str]:
    """Why nothing in the request's pool can take it now."""
    res = req.resources
    pool_nodes = state.pool_nodes.get(req.pool)
    if not pool_nodes:
        return WaitCode.NO_NODE, f"no schedulable node in resource pool '{req.pool}'"
    if res.gpu == 0 and not req.gpu_mem:
        return WaitCode.CAPACITY, _host_reason(res, pool_nodes, "")
    groups = state.matching_groups(req.pool, req.gpu_model)
    if not groups:
        models = sorted({k[1] for k in state.groups if k[0] == req.pool}) or ["none"]
        return WaitCode.NO_NODE, (
            f"no node in pool '{req.pool}' has a GPU matching model '{req.gpu_model}' "
            f"(models here: {', '.join(models)})"
        )
    amounts = [(g, gpu) for g in groups if (gpu := g.gpu_of(req, state.step)) is not None]
    if not amounts:  # by GPU memory, more than any device here has
        largest = max(g.mem for g in groups)
        return WaitCode.NO_NODE, (
            f"needs {format_mem(req.gpu_mem)} of GPU memory on one GPU; the largest GPU in "
            f"pool '{req.pool}' has {format_mem(largest)}"
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
        f"on any node in pool '{req.pool}' (1 GPU = {' or '.join(caps)} fGPU)"
    )


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
        if group.amounts and group.amounts[-1] >= gpu:
            fits = True
        if group.amounts and group.amounts[-1] > largest:
            largest = group.amounts[-1]
            rank, pos = next(state.devices_at(group, largest))
            ns = state.nodes[rank]
            where = f" ({ns.node.name} GPU {ns.node.devices[pos].index})"
    if not fits:
        if largest == 0:
            return f"{need}; no GPU has a free slice"
        return f"{need}; the largest free slice is {format_fgpu(largest)} fGPU{where}"
    hosts = [
        ns for g, gpu in groups for ns in g.nodes
        if any(ns.free(p) >= gpu and p not in ns.held for p in ns.groups[g.key])
    ]
    return _host_reason(req.resources, hosts, f"{need} and, on the same node, ")


def _whole_reason(
    state: ClusterState, res: Resources, groups: list[tuple[GroupIndex, int]]
) -> str:
    k = min(k for _, k in groups)
    need = f"needs {k} whole GPU{'s' if k > 1 else ''} on one node"
    most, where = 0, ""
    for group, _ in groups:
        if group.counts and group.counts[-1] > most:
            most = group.counts[-1]
            where = f" ({state.nodes[group.whole[most][0]].node.name})"
    if all(most < kk for _, kk in groups):
        return f"{need}; the most entirely free GPUs on one node is {most}{where}"
    hosts = [ns for g, kk in groups for ns in g.nodes if len(ns.whole_free(g.key)) >= kk]
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
