"""Requests that can never start are refused when they are made, not left waiting forever."""

from __future__ import annotations

from collections.abc import Sequence

from gpuslice.common.resources import MiB, format_cpu, format_fgpu, format_mem, slice_share
from gpuslice.manager.scheduler.model import Device, Node, Quota, Request, groups_of, request_gpu
from gpuslice.manager.scheduler.reasons import group_words


def check_request(
    req: Request, nodes: Sequence[Node], quota: Quota, default_device_capacity: int,
    step: int = 10, project_quota: Quota | None = None,
) -> str | None:
    """A message saying why ``req`` can never be scheduled, or None if it could be one day.

    Checks, in order: the GPU shape (above one GPU it must be whole GPUs; by GPU memory, a GPU
    must have that much), the user's quota totals, and whether any node in the request's pool
    could hold it when entirely free. With no node in the pool yet the request may wait: nodes
    can join later; so may it while a node of the pool has not reported its capacity (just
    joined: its first report may show room), and only its shape and the quotas are judged
    meanwhile. ``step``: the cluster's fGPU step (milli-fGPU), for requests by memory.
    ``project_quota``: its project's, checked as the user's is (None: unlimited).
    """
    pending = any(not n.reported for n in nodes if n.pool in groups_of(req))
    if req.gpu_mem:
        least = _least_gpu(req, nodes, step)
        return (
            (None if pending else _memory_error(req, nodes)
             or _below_smallest_slice(req, nodes, step))
            or _quota_error(req, quota, least)
            or _project_quota_error(req, project_quota, least)
            or (None if pending else _capacity_error(req, nodes, step))
        )
    return (
        _shape_error(req, nodes, default_device_capacity)
        or _quota_error(req, quota, req.resources.gpu)
        or _project_quota_error(req, project_quota, req.resources.gpu)
        or (None if pending else _capacity_error(req, nodes, step))
    )


def _caps(req: Request, nodes: Sequence[Node], default_device_capacity: int) -> list[int]:
    caps = {n.device_capacity for n in nodes if n.pool in groups_of(req) and n.devices}
    return sorted(caps or {default_device_capacity})


def _shape_error(req: Request, nodes: Sequence[Node], default_device_capacity: int) -> str | None:
    gpu = req.resources.gpu
    caps = _caps(req, nodes, default_device_capacity)
    if gpu == 0 or any(gpu <= cap or gpu % cap == 0 for cap in caps):
        return None
    ratio = " or ".join(format_fgpu(c) for c in caps)
    return (
        f"{format_fgpu(gpu)} fGPU is more than one GPU (1 GPU = {ratio} fGPU) and not a whole "
        f"number of GPUs: ask for at most one GPU's worth, or a multiple of {ratio} fGPU"
    )


def _memory_error(req: Request, nodes: Sequence[Node]) -> str | None:
    """By GPU memory: refused when no GPU in the pool (of the model asked) has that much."""
    devices = [d for n in nodes if n.pool in groups_of(req) for d in _matching(n, req)]
    if not devices or any(d.mem >= req.gpu_mem for d in devices):
        return None
    largest = max(devices, key=lambda d: d.mem)
    return (
        f"needs {format_mem(req.gpu_mem)} of GPU memory on one GPU, more than any GPU in "
        f"{group_words(req)} has: the most possible is {format_mem(largest.mem)} (a whole "
        f"{largest.model})"
    )


def _below_smallest_slice(req: Request, nodes: Sequence[Node], step: int) -> str | None:
    """By GPU memory: refused when it is less than the smallest slice of every GPU in the pool,
    almost always a unit mistake (2048 bytes meant as MiB) that would run on a sliver and
    report success; the answer names the smallest slice there is."""
    slices = [
        (slice_share(d.mem, min(step, n.device_capacity), n.device_capacity), d)
        for n in nodes if n.pool in groups_of(req) for d in _matching(n, req)
    ]
    if not slices or any(req.gpu_mem >= least for least, _ in slices):
        return None
    least, device = min(slices, key=lambda s: s[0])
    at_least = -(-least // MiB) * MiB  # a round figure that is surely enough
    return (
        f"asks for {format_mem(req.gpu_mem)} of GPU memory, less than the smallest slice in "
        f"{group_words(req)} ({format_fgpu(step)} fGPU of the {format_mem(device.mem)} "
        f"{device.model}: {format_mem(least)}); ask for at least {format_mem(at_least)}"
    )


def _least_gpu(req: Request, nodes: Sequence[Node], step: int) -> int:
    """The smallest slice a request by memory would take on any device (0: none known yet)."""
    amounts = [
        gpu for n in nodes if n.pool in groups_of(req) for d in _matching(n, req)
        if (gpu := request_gpu(req, d.mem, n.device_capacity, step)) is not None
    ]
    return min(amounts, default=0)


def _matching(node: Node, req: Request) -> list[Device]:
    wanted = req.gpu_model.casefold() if req.gpu_model else None
    return [d for d in node.devices if wanted is None or wanted in d.model.casefold()]


def _project_quota_error(req: Request, quota: Quota | None, gpu: int) -> str | None:
    if quota is None:
        return None
    return _quota_error(req, quota, gpu, f"project {req.project}'s quota")


def _quota_error(
    req: Request, quota: Quota, gpu: int, whose: str = "your quota"
) -> str | None:
    res = req.resources
    if quota.max_sessions is not None and quota.max_sessions < 1:
        return f"{whose} allows no sessions; ask an admin to raise max_sessions"
    checks = (
        (quota.max_gpu, gpu, format_fgpu, "fGPU"),
        (quota.max_cpu, res.cpu, format_cpu, "CPU"),
        (quota.max_mem, res.mem, format_mem, "of memory"),
    )
    for limit, asked, fmt, unit in checks:
        if limit is not None and asked > limit:
            return (
                f"asks for {fmt(asked)} {unit} but {whose} allows at most {fmt(limit)} {unit} "
                "in total"
            )
    return None


def _capacity_error(req: Request, nodes: Sequence[Node], step: int) -> str | None:
    pools = groups_of(req)
    pool = [n for n in nodes if n.pool in pools]
    if not pool or any(_could_hold(n, req, step) for n in pool):
        return None
    res = req.resources
    most_cpu = max(n.cpu for n in pool)
    most_mem = max(n.mem for n in pool)
    model = f" of model '{req.gpu_model}'" if req.gpu_model else ""
    gpu = f"{format_fgpu(res.gpu)} fGPU"
    if req.gpu_mem:
        gpu = f"{format_mem(req.gpu_mem)} of GPU memory"
    return (
        f"no node in {group_words(req)} could ever hold {gpu}{model}, "
        f"{format_cpu(res.cpu)} CPU and {format_mem(res.mem)} of memory "
        f"(largest node: {format_cpu(most_cpu)} CPU, {format_mem(most_mem)}, "
        f"{max(len(n.devices) for n in pool)} GPUs)"
    )


def _could_hold(node: Node, req: Request, step: int) -> bool:
    res = req.resources
    if res.cpu > node.cpu or res.mem > node.mem:
        return False
    if req.gpu_mem:
        return any(
            request_gpu(req, d.mem, node.device_capacity, step) is not None
            for d in _matching(node, req)
        )
    if res.gpu == 0:
        return True
    per_model: dict[str, int] = {}
    for dev in _matching(node, req):
        per_model[dev.model] = per_model.get(dev.model, 0) + 1
    cap = node.device_capacity
    if not per_model:
        return False
    if res.gpu <= cap:
        return True
    return res.gpu % cap == 0 and max(per_model.values()) >= res.gpu // cap
