"""Preemption, pure: which running sessions to stop so that waiting ones of a higher rank fit.

``plan_preemptions(winners, candidates, nodes, config, now)`` looks at requests still waiting
for capacity after a pass, highest rank first, and for each picks the node where stopping the
fewest lower-rank candidates (then the lowest-ranked, then the most recently started: the least
work lost) makes it fit, and where on that node it would go. Candidates are what the caller
allows to be preempted at all (RUNNING batch sessions past their class's minimum runtime, or
interactive ones of a class that allows it); this module only compares ranks and capacity.
A candidate is chosen for one winner at most, and a later winner of the same call plans on the
cluster as if the earlier winners' victims were gone and they were placed.

Like ``schedule()``, it changes none of its inputs and its answer depends only on them. Fit is
decided by ``schedule()`` itself, on one node, so preemption can never place what a pass would
refuse (slices, whole GPUs, GPU memory, cpu and memory all follow the core's rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.core import schedule
from gpuslice.manager.scheduler.model import (
    Device,
    Node,
    Placement,
    Policy,
    Request,
    SchedulerConfig,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running session that may be preempted: where it runs and what it holds."""

    id: str
    node_id: str
    rank: int
    resources: Resources  # cpu and memory on its node (gpu: the total of its slices)
    slices: tuple[tuple[int, int], ...]  # (device index, milli-fGPU) it holds
    since: float  # when it started running (a later start loses less work)


@dataclass(frozen=True, slots=True)
class Winner:
    """A waiting request and its class's rank."""

    request: Request
    rank: int


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victims`` so that ``winner`` fits on ``node_id`` as ``placement`` says."""

    winner: str
    node_id: str
    victims: tuple[str, ...]
    placement: Placement


def may_preempt(
    batch: bool, rank: int, below: int, preempt_interactive: bool, ran_s: float,
    min_runtime_s: float,
) -> bool:
    """Whether a RUNNING session may be preempted for a waiting one of rank ``below``: a lower
    rank, a batch session (interactive ones only when their class says so), and it has run
    its class's minimum runtime."""
    if rank >= below:
        return False
    if not batch and not preempt_interactive:
        return False  # interactive work is never preempted unless its class says so
    return ran_s >= min_runtime_s


def plan_preemptions(
    winners: Sequence[Winner], candidates: Sequence[Candidate], nodes: Sequence[Node],
    config: SchedulerConfig, now: float, limit: int = 16,
) -> list[Preemption]:
    """At most ``limit`` preemptions, for ``winners`` in the order given (the queue's)."""
    work = {n.id: _copy(n) for n in nodes}
    by_node: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.node_id in work:
            by_node.setdefault(c.node_id, []).append(c)
    plans: list[Preemption] = []
    for winner in winners:
        if len(plans) >= limit:
            break
        best: tuple[tuple[int, int, str], Preemption, list[Candidate]] | None = None
        for node_id in sorted(by_node):
            node = work[node_id]
            lower = [c for c in by_node[node_id] if c.rank < winner.rank]
            if node.pool != winner.request.pool or not lower:
                continue
            found = _fewest(winner.request, node, lower, config, now)
            if found is None:
                continue
            placement, victims = found
            score = (len(victims), max(v.rank for v in victims), node_id)
            if best is None or score < best[0]:
                best = (score, Preemption(winner.request.id, node_id,
                                          tuple(sorted(v.id for v in victims)), placement),
                        victims)
        if best is None:
            continue
        _, plan, victims = best
        plans.append(plan)
        node = work[plan.node_id]
        for v in victims:
            _free(node, v)
            by_node[plan.node_id].remove(v)
        _take(node, plan.placement)
    return plans


def _fewest(
    req: Request, node: Node, lower: list[Candidate], config: SchedulerConfig, now: float,
) -> tuple[Placement, list[Candidate]] | None:
    """The fewest of ``lower`` whose stop lets ``req`` fit on ``node``, and where it would go:
    candidates added cheapest first until it fits, then each dropped again if it still fits
    without it."""
    order = sorted(lower, key=lambda c: (c.rank, -c.since, c.id))
    trial = _copy(node)
    chosen: list[Candidate] = []
    placement = None
    for c in order:
        _free(trial, c)
        chosen.append(c)
        placement = _fits(req, trial, config, now)
        if placement is not None:
            break
    if placement is None:
        return None
    for c in list(chosen):
        without = [v for v in chosen if v is not c]
        trial = _copy(node)
        for v in without:
            _free(trial, v)
        again = _fits(req, trial, config, now)
        if again is not None:
            chosen, placement = without, again
    return placement, chosen


def _fits(req: Request, node: Node, config: SchedulerConfig, now: float) -> Placement | None:
    # The core decides, on this node alone, with no quota (the winner's was checked by its pass)
    one = replace(config, policy=Policy.FIFO)
    result = schedule([replace(req, user="")], [node], {}, one, now)
    return result.placements[0] if result.placements else None


def _copy(node: Node) -> Node:
    return replace(node, devices=[replace(d) for d in node.devices])


def _device(node: Node, index: int) -> Device | None:
    return next((d for d in node.devices if d.index == index), None)


def _free(node: Node, c: Candidate) -> None:
    node.cpu_used = max(0, node.cpu_used - c.resources.cpu)
    node.mem_used = max(0, node.mem_used - c.resources.mem)
    for index, gpu in c.slices:
        device = _device(node, index)
        if device is not None:
            device.used = max(0, device.used - gpu)


def _take(node: Node, placement: Placement) -> None:
    node.cpu_used += placement.resources.cpu
    node.mem_used += placement.resources.mem
    for piece in placement.slices:
        device = _device(node, piece.index)
        if device is not None:
            device.used += piece.gpu
