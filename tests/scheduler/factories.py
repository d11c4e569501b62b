"""Small builders for scheduler inputs, with defaults that tests override."""

from __future__ import annotations

from gpuslice.common.resources import GiB, Resources, parse_cpu, parse_fgpu, parse_mem
from gpuslice.manager.scheduler import Device, Node, Placement, Request


def node(
    name: str = "node-1", *, gpus: int = 1, gpu_mem: str = "8GiB", fgpu_per_gpu: int = 1,
    cpu: str = "64", mem: str = "256g", model: str = "Mock A100", pool: str = "default",
    sms: int = 108,
) -> Node:
    return Node(
        id=name, name=name, cpu=parse_cpu(cpu), mem=parse_mem(mem), pool=pool,
        devices=[
            Device(i, f"GPU-{name}-{i}", model, parse_mem(gpu_mem), sms) for i in range(gpus)
        ],
        device_capacity=fgpu_per_gpu * 1000,
    )


def req(
    rid: str, gpu: float | str = 1, *, user: str = "alice", at: float = 0.0, cpu: str = "1",
    mem: str = "1g", priority: int = 0, model: str | None = None, pool: str = "default",
    gpu_mem: str | None = None, project: str | None = None, pools: set[str] | None = None,
    limit: float | None = None,
) -> Request:
    """``gpu_mem`` asks by GPU memory (``gpu`` is then ignored); ``pools``: the resource
    groups it may use when more than ``pool``."""
    fgpu = 0 if gpu_mem else parse_fgpu(gpu)
    return Request(
        rid, user, Resources(fgpu, parse_cpu(cpu), parse_mem(mem)), enqueued_at=at,
        priority=priority, gpu_model=model, pool=pool,
        gpu_mem=parse_mem(gpu_mem) if gpu_mem else 0, project=project,
        pools=None if pools is None else frozenset(pools), time_limit=limit,
    )


def queue(n: int, gpu: float | str = 1, **kw) -> list[Request]:
    return [req(f"r{i:03d}", gpu, at=float(i), **kw) for i in range(n)]


def apply(nodes: list[Node], placements: list[Placement]) -> None:
    """Commit placements into the nodes, as the manager does with allocations."""
    _shift(nodes, placements, +1)


def release(nodes: list[Node], placements: list[Placement]) -> None:
    _shift(nodes, placements, -1)


def _shift(nodes: list[Node], placements: list[Placement], sign: int) -> None:
    by_id = {n.id: n for n in nodes}
    for p in placements:
        n = by_id[p.node_id]
        for s in p.slices:
            dev = next(d for d in n.devices if d.index == s.index)
            dev.used += sign * s.gpu
        n.cpu_used += sign * p.resources.cpu
        n.mem_used += sign * p.resources.mem


__all__ = ["GiB", "apply", "node", "queue", "release", "req"]
