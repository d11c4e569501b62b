"""Reservations and backfill (the backfill policy): capacity held for a waiting request, when it
is expected to be enough, and which later requests may still use it meanwhile.

A hold keeps devices (and cpu/memory) of one node from the rest of the pass. Its ``start`` is
the earliest time at which, by the time limits of what runs there (``Node.running``, and what
this pass placed on that node), the held capacity will be enough for its request; ``inf`` when
something it waits for has no time limit. A later request may be placed *on* held capacity only
if its own time limit ends by then (``now + time_limit <= start``): it is gone before the
reservation needs the room, so it delays nobody. Requests that fit beside the holds are placed
as usual (``ClusterState.find`` never sees held devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.model import Placement, Request, Running, make_slice
from gpuslice.manager.scheduler.state import ClusterState, Found, NodeState

INF = math.inf


@dataclass(slots=True)
class Hold:
    """Capacity held for one waiting request during a pass."""

    node: NodeState
    positions: list[int]  # device positions held (none: cpu/memory only)
    start: float = INF  # when it is expected to be enough (inf: not known)
    cpu: int = 0  # what was taken from the node's free counters for it
    mem: int = 0


def hold_start(
    hold: Hold, need: list[int], res: Resources, running: list[Running], now: float
) -> float:
    """When the held devices have ``need`` (milli-fGPU, per held position) free and the node
    ``res``'s cpu and memory, as what runs there ends by its time limit (inf: never known)."""
    ns = hold.node
    free = {p: ns.free[p] for p in hold.positions}
    cpu, mem = ns.cpu_free + hold.cpu, ns.mem_free + hold.mem

    def enough() -> bool:
        return (cpu >= res.cpu and mem >= res.mem
                and all(free[p] >= n for p, n in zip(hold.positions, need, strict=True)))

    if enough():
        return now
    where = {d.index: p for p, d in enumerate(ns.node.devices)}
    for run in sorted(running, key=_end):
        if run.ends_at is None:
            return INF  # everything after it ends no sooner: nothing more is known
        cpu, mem = cpu + run.cpu, mem + run.mem
        for index, gpu in run.slices:
            p = where.get(index)
            if p in free:
                free[p] += gpu
        if enough():
            return max(run.ends_at, now)
    return INF


def place_in_hold(
    state: ClusterState, holds: list[Hold], req: Request, now: float
) -> tuple[Found, Hold] | None:
    """A place for ``req`` on held capacity that it gives back before the hold needs it: one
    slice of one held device, or (no GPU) the held cpu/memory. ``None``: no such place (a hold
    whose start is not known, ``inf``, takes nobody: any job might outlast it)."""
    if req.time_limit is None:
        return None  # it may run for ever: it would delay every reservation it sat on
    res, ends = req.resources, now + req.time_limit
    for hold in holds:
        if math.isinf(hold.start) or hold.start < ends or not _may_use(req, hold.node.node.pool):
            continue
        ns = hold.node
        if ns.cpu_free + hold.cpu < res.cpu or ns.mem_free + hold.mem < res.mem:
            continue
        if res.gpu == 0 and not req.gpu_mem:
            return Found(Placement(req.id, ns.node.id, res, ()), ns, [], None), hold
        found = _on_held_device(state, hold, req)
        if found is not None:
            return found, hold
    return None


def _may_use(req: Request, pool: str) -> bool:
    """Whether ``req`` may run in resource group ``pool`` (its one, or any of its list)."""
    return pool == req.pool if req.pools is None else pool in req.pools


def take_from_hold(hold: Hold, found: Found) -> None:
    """Allocate ``found`` (from ``place_in_hold``): its device slice from the held device (which
    stays out of the index), its cpu/memory from the hold's first, then from the node's."""
    ns, res = hold.node, found.placement.resources
    for pos, piece in zip(found.positions, found.placement.slices, strict=True):
        ns.free[pos] -= piece.gpu
    from_hold = min(hold.cpu, res.cpu)
    hold.cpu -= from_hold
    ns.cpu_free -= res.cpu - from_hold
    from_hold = min(hold.mem, res.mem)
    hold.mem -= from_hold
    ns.mem_free -= res.mem - from_hold


def ran_from(placement: Placement, time_limit: float | None, now: float) -> Running:
    """What a placement of this pass leaves running on its node, and until when."""
    return Running(
        None if time_limit is None else now + time_limit, placement.resources.cpu,
        placement.resources.mem, tuple((s.index, s.gpu) for s in placement.slices),
    )


def _on_held_device(state: ClusterState, hold: Hold, req: Request) -> Found | None:
    ns = hold.node
    matching = state.groups_for(req)  # its resource groups and GPU model
    best: tuple[int, int, int] | None = None  # (leftover, position, slice)
    for pos in hold.positions:
        group = ns.device_groups[pos]
        if group not in matching:
            continue
        gpu = group.gpu_of(req, state.step)
        if gpu is None or group.kind(gpu) != 0 or ns.free[pos] < gpu:
            continue  # only single slices backfill onto held devices
        if best is None or (ns.free[pos] - gpu, pos) < best[:2]:
            best = (ns.free[pos] - gpu, pos, gpu)
    if best is None:
        return None
    _, pos, gpu = best
    node = ns.node
    res = req.resources
    if gpu != res.gpu:
        res = Resources(gpu, res.cpu, res.mem)
    piece = make_slice(node, node.devices[pos], gpu)
    return Found(Placement(req.id, node.id, res, (piece,)), ns, [pos], ns.device_groups[pos])


def _end(run: Running) -> float:
    return INF if run.ends_at is None else run.ends_at
