"""Held capacity (preemption), pure: what a winner holds while its victims stop is its alone.

Once ``plan_preemptions`` chose a winner's victims, the manager records the winner's *hold*
(``Hold``: the plan's node, its slices there and its cpu and memory) until it is placed.
``schedule_with_holds`` is ``schedule()`` with those holds kept: each winner is tried first, on
its held node only, and what the holds keep and their winners did not take yet is used by no
one else. A winner that still does not fit waits with code ``preempting``. Like ``schedule()``,
it changes none of its inputs and its answer depends only on them: the manager's pass, the
launch preview and the benchmarks call it alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.core import queue_order, schedule
from gpuslice.manager.scheduler.model import (
    Node,
    PassResult,
    Request,
    SchedulerConfig,
    UserState,
    WaitCode,
    Waiting,
    copy_node,
)
from gpuslice.manager.scheduler.reasons import preempting


@dataclass(frozen=True, slots=True)
class Hold:
    """Capacity held for a winner on one node: its cpu and memory, and its planned slices."""

    node_id: str
    resources: Resources
    slices: tuple[tuple[int, int], ...]  # (device index, milli-fGPU)


def schedule_with_holds(
    requests: Sequence[Request], nodes: Sequence[Node], users: Mapping[str, UserState],
    config: SchedulerConfig, now: float, holds: Mapping[str, Hold],
    projects: Mapping[str, UserState] | None = None,
) -> PassResult:
    """``schedule()``, with each hold's capacity kept for its winner: winners are tried first,
    each on its held node only; what they hold and did not take yet is used by no one else.
    ``holds``: by request id; ``projects``: the projects' quotas and usage by name, as
    ``schedule()`` takes them."""
    by_id = {n.id: n for n in nodes}
    holders = [r for r in queue_order(requests) if r.id in holds and holds[r.id].node_id in by_id]
    if not holders:
        return schedule(requests, nodes, users, config, now, projects)
    projects = dict(projects or {})
    held_on = {holds[r.id].node_id for r in holders}
    work = {node_id: copy_node(by_id[node_id]) for node_id in held_on}
    users = dict(users)
    placed = PassResult()
    left: list[Request] = []
    for i, req in enumerate(holders):
        node = work[holds[req.id].node_id]
        view = copy_node(node)
        for other in [*left, *holders[i + 1:]]:  # other winners' holds here stay theirs
            if holds[other.id].node_id == node.id:
                _add(view, holds[other.id])
        one = schedule([req], [view], users, config, now, projects)
        if one.placements:
            placement = one.placements[0]
            placed.placements.append(placement)
            _add(node, Hold(node.id, placement.resources,
                            tuple((s.index, s.gpu) for s in placement.slices)))
            users = _count(users, req.user, placement.resources)
            if req.project is not None:
                projects = _count(projects, req.project, placement.resources)
        else:
            left.append(req)
    for req in left:
        _add(work[holds[req.id].node_id], holds[req.id])
    holder_ids = {h.id for h in holders}
    others = [r for r in requests if r.id not in holder_ids]
    rest = schedule(others, [work.get(n.id, n) for n in nodes], users, config, now, projects)
    placed.placements.extend(rest.placements)
    placed.waiting.update(rest.waiting)
    if not left:  # the rest's positions are already right: no holder waits among them
        return placed
    for req in left:
        name = work[holds[req.id].node_id].name
        placed.waiting[req.id] = Waiting(req.id, WaitCode.PREEMPTING, preempting(name), 0)
    return _renumbered(placed, requests)


def with_holds(nodes: Sequence[Node], holds: Iterable[Hold]) -> list[Node]:
    """``nodes`` with what ``holds`` keep counted as used (copies of the nodes held on): how a
    new winner plans, never on another's hold."""
    by_node: dict[str, list[Hold]] = {}
    for hold in holds:
        by_node.setdefault(hold.node_id, []).append(hold)
    out = []
    for node in nodes:
        if node.id in by_node:
            node = copy_node(node)
            for hold in by_node[node.id]:
                _add(node, hold)
        out.append(node)
    return out


# ------------------------------------------------------------ helpers


def _add(node: Node, hold: Hold) -> None:
    """Count ``hold`` as used on ``node``, never beyond its capacity."""
    node.cpu_used = min(node.cpu, node.cpu_used + hold.resources.cpu)
    node.mem_used = min(node.mem, node.mem_used + hold.resources.mem)
    for index, gpu in hold.slices:
        for device in node.devices:
            if device.index == index:
                device.used = min(node.device_capacity, device.used + gpu)


def _count(users: dict[str, UserState], uid: str, res: Resources) -> dict[str, UserState]:
    user = users.get(uid)
    if user is not None:
        used = Resources(user.used.gpu + res.gpu, user.used.cpu + res.cpu,
                         user.used.mem + res.mem)
        users[uid] = UserState(user.quota, user.sessions + 1, used, user.used_models)
    return users


def _renumbered(result: PassResult, requests: Sequence[Request]) -> PassResult:
    """Queue positions (per pool, 1-based) over holders and the rest together."""
    positions: dict[str, int] = {}
    for req in queue_order(requests):
        w = result.waiting.get(req.id)
        if w is not None:
            positions[req.pool] = positions.get(req.pool, 0) + 1
            result.waiting[req.id] = Waiting(w.request_id, w.code, w.reason,
                                             positions[req.pool])
    return result
