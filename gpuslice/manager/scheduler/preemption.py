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
from dataclasses import dataclass, field, replace

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.core import schedule
from gpuslice.manager.scheduler.model import (
    Device,
    Node,
    Placement,
    Policy,
    Request,
    SchedulerConfig,
    copy_node,
    groups_of,
)

# Winners one manager's pass preempts for (each its own transaction); the rest wait for the
# next pass.
MAX_PER_PASS = 16


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


def ranked(rank: int, priority: int) -> int:
    """The queue's priority: the class's rank first, then the session's own priority."""
    return rank * 1000 + priority


def plan_preemptions(
    winners: Sequence[Winner], candidates: Sequence[Candidate], nodes: Sequence[Node],
    config: SchedulerConfig, now: float, limit: int = MAX_PER_PASS,
) -> list[Preemption]:
    """At most ``limit`` preemptions, for ``winners`` in the order given (the queue's).

    A winner looks at every node of every resource group it may use (``groups_of``): the
    fewest victims anywhere, then the lowest-ranked, then a node of its own ``pool`` (then
    the group's name), then the node id."""
    plan = _Planner(candidates, nodes)
    plans: list[Preemption] = []
    for winner in winners:
        if len(plans) >= limit:
            break
        best = plan.best(winner, config, now)
        if best is not None:
            plans.append(best[0])
            plan.apply(*best)
    return plans


@dataclass(slots=True)
class _Room:
    """What a node would have free once every candidate below a rank is stopped: cpu, memory,
    and per GPU model and device capacity the largest free slice and how many devices would
    be entirely free."""

    cpu: int
    mem: int
    models: dict[tuple[str, int], tuple[int, int]]
    # for ``_least_victims``: the candidates' cpu and memory, largest first; their slices on
    # each device, largest first; the most devices one candidate holds
    cpus: list[int] = field(default_factory=list)
    mems: list[int] = field(default_factory=list)
    on: dict[int, list[int]] = field(default_factory=dict)
    widest: int = 1
    # per GPU model: how many candidates stand on each device that stopping them would clear
    clear: dict[str, list[int]] = field(default_factory=dict)

    def could_fit(self, req: Request) -> bool:
        """A necessary condition for ``req`` to fit (``schedule()`` decides): most nodes fail
        it, and it costs a few comparisons instead of a pass per candidate."""
        res = req.resources
        if res.cpu > self.cpu or res.mem > self.mem:
            return False
        if res.gpu == 0 and not req.gpu_mem:
            return True
        wanted = req.gpu_model.casefold() if req.gpu_model else None
        for (model, cap), (largest, whole) in self.models.items():
            if wanted is not None and wanted not in model.casefold():
                continue
            if req.gpu_mem or (res.gpu <= cap and largest >= res.gpu):
                return True  # (by GPU memory the slice depends on the device: let it decide)
            if res.gpu > cap and res.gpu % cap == 0 and whole >= res.gpu // cap:
                return True
        return False


class _Planner:
    """The cluster as earlier winners of this call left it, and each node's room by rank."""

    def __init__(self, candidates: Sequence[Candidate], nodes: Sequence[Node]) -> None:
        self.work = {n.id: n for n in nodes}  # copied on first change only
        self.copied: set[str] = set()
        self.by_node: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.node_id in self.work:
                self.by_node.setdefault(c.node_id, []).append(c)
        self.by_pool: dict[str, list[str]] = {}
        for node_id in sorted(self.by_node):
            self.by_pool.setdefault(self.work[node_id].pool, []).append(node_id)
        self.lowest = min((c.rank for c in candidates), default=0)
        self.rooms: dict[tuple[str, int], _Room | None] = {}  # (node id, rank) -> room
        self.pools: dict[tuple[str, int], _Room] = {}  # (pool, rank) -> the most of any node
        # (pool, rank, GPU shape) -> the fewest victims any node of the pool could need for
        # that GPU shape (cpu and memory aside), and the shape as a request
        self.least: dict[tuple[str, int, tuple[int, str | None, int]], tuple[int, Request]] = {}

    def best(
        self, winner: Winner, config: SchedulerConfig, now: float,
    ) -> tuple[Preemption, list[Candidate]] | None:
        req = winner.request
        pools = sorted(groups_of(req), key=lambda p: (p != req.pool, p))
        best: tuple[tuple[int, int, bool, str, str], Preemption, list[Candidate]] | None = None
        for pool in pools:
            if not self._pool_room(pool, winner.rank).could_fit(req):
                continue
            least = self._pool_least(pool, winner.rank, req)
            for node_id in self.by_pool.get(pool, ()):
                if best is not None and _cannot_beat(best[0], least, self.lowest):
                    break  # no node left in this group could do better
                room = self._room(node_id, winner.rank)
                node = self.work[node_id]
                if room is None or not room.could_fit(req):
                    continue
                if best is not None and _cannot_beat(best[0], _least_victims(req, node, room),
                                                     self.lowest):
                    continue
                lower = [c for c in self.by_node[node_id] if c.rank < winner.rank]
                found = _fewest(req, node, lower, config, now)
                if found is None:
                    continue
                placement, victims = found
                score = (len(victims), max(v.rank for v in victims), pool != req.pool, pool,
                         node_id)
                if best is None or score < best[0]:
                    victim_ids = tuple(sorted(v.id for v in victims))
                    best = (score, Preemption(req.id, node_id, victim_ids, placement), victims)
                if score[:2] == (1, self.lowest):
                    return best[1], best[2]  # nothing later can do with fewer or lower victims
        return None if best is None else (best[1], best[2])

    def apply(self, plan: Preemption, victims: list[Candidate]) -> None:
        """Later winners plan as if ``plan``'s victims were gone and its winner placed."""
        node_id = plan.node_id
        if node_id not in self.copied:
            self.work[node_id] = copy_node(self.work[node_id])
            self.copied.add(node_id)
        node = self.work[node_id]
        for v in victims:
            _free(node, v)
            self.by_node[node_id].remove(v)
        _take(node, plan.placement)
        self.rooms = {k: r for k, r in self.rooms.items() if k[0] != node_id}
        # A group's room is only an upper bound: for ranks above every victim's, the node's
        # room only shrank (its victims were counted as freeable, and the winner took room),
        # so it stays one; below, a victim no lower rank could stop is gone: work it out again.
        top = max(v.rank for v in victims)
        self.pools = {k: r for k, r in self.pools.items() if k[0] != node.pool or k[1] > top}
        for key, (least, shape) in self.least.items():  # only this node's bound may be lower
            room = self._room(node_id, key[1]) if key[0] == node.pool else None
            if room is not None and room.could_fit(shape):
                self.least[key] = (min(least, _least_victims(shape, node, room)), shape)

    def _room(self, node_id: str, rank: int) -> _Room | None:
        key = (node_id, rank)
        if key not in self.rooms:
            lower = [c for c in self.by_node[node_id] if c.rank < rank]
            self.rooms[key] = _room_of(self.work[node_id], lower, True) if lower else None
        return self.rooms[key]

    def _pool_least(self, pool: str, rank: int, req: Request) -> int:
        """The fewest victims any node of ``pool`` could need for ``req``'s GPU shape."""
        key = (pool, rank, (req.resources.gpu, req.gpu_model, req.gpu_mem))
        found = self.least.get(key)
        if found is None:
            shape = replace(req, resources=Resources(req.resources.gpu, 0, 0))
            least = _NEVER
            for node_id in self.by_pool.get(pool, ()):
                room = self._room(node_id, rank)
                if room is not None and room.could_fit(shape):
                    least = min(least, _least_victims(shape, self.work[node_id], room))
            found = self.least[key] = (least, shape)
        return found[0]

    def _pool_room(self, pool: str, rank: int) -> _Room:
        key = (pool, rank)
        room = self.pools.get(key)
        if room is None:
            room = self.pools[key] = _Room(0, 0, {})
            for node_id in self.by_pool.get(pool, ()):
                one = self._room(node_id, rank)
                if one is None:
                    continue
                room.cpu, room.mem = max(room.cpu, one.cpu), max(room.mem, one.mem)
                for model, (largest, whole) in one.models.items():
                    was = room.models.get(model, (0, 0))
                    room.models[model] = (max(was[0], largest), max(was[1], whole))
        return room


def _room_of(node: Node, lower: list[Candidate], detail: bool = False) -> _Room:
    """``node``'s room once ``lower`` are stopped (``detail``: with what ``_least_victims``
    reads, kept per node and rank)."""
    free = {d.index: node.device_capacity - d.used for d in node.devices}
    on: dict[int, list[int]] = {index: [] for index in free}
    for c in lower:
        for index, gpu in c.slices:
            if index in free:
                free[index] += gpu
                on[index].append(gpu)
    models: dict[tuple[str, int], tuple[int, int]] = {}
    cap = node.device_capacity
    for d in node.devices:
        largest, whole = models.get((d.model, cap), (0, 0))
        f = free[d.index]
        models[d.model, cap] = (max(largest, f), whole + (f >= cap))
    room = _Room(node.cpu - node.cpu_used + sum(c.resources.cpu for c in lower),
                 node.mem - node.mem_used + sum(c.resources.mem for c in lower), models)
    if detail:
        room.cpus = sorted((c.resources.cpu for c in lower), reverse=True)
        room.mems = sorted((c.resources.mem for c in lower), reverse=True)
        room.on = {index: sorted(gpus, reverse=True) for index, gpus in on.items()}
        room.widest = max((len(c.slices) for c in lower), default=1) or 1
        for d in node.devices:
            if free[d.index] >= node.device_capacity:
                room.clear.setdefault(d.model, []).append(len(on[d.index]))
        for counts in room.clear.values():
            counts.sort()
    return room


def _cannot_beat(best: tuple[int, int, bool, str, str], least: int, lowest: int) -> bool:
    """Whether a node needing at least ``least`` victims, met later in the order the score
    breaks ties by, could not beat ``best``: more victims, or as many and ``best``'s already
    of the lowest rank."""
    return least > best[0] or (least == best[0] and best[1] == lowest)


def _least_victims(req: Request, node: Node, room: _Room) -> int:
    """A lower bound on the victims ``req`` needs on ``node`` (``_fewest`` never finds fewer):
    the fewest of the largest candidates (``room``'s, below the winner's rank) that could make
    room in cpu, in memory, and on one device (a slice) or whole devices; at least one."""
    res = req.resources
    least = max(1, _count_to(res.cpu - (node.cpu - node.cpu_used), room.cpus),
                _count_to(res.mem - (node.mem - node.mem_used), room.mems))
    cap = node.device_capacity
    if req.gpu_mem or res.gpu == 0 or (res.gpu > cap and res.gpu % cap):
        return least
    on = room.on
    wanted = req.gpu_model.casefold() if req.gpu_model else None
    if res.gpu <= cap:  # one slice: the device needing the fewest
        devices = [d for d in node.devices if wanted is None or wanted in d.model.casefold()]
        one = min((_count_to(res.gpu - (cap - d.used), on[d.index]) for d in devices),
                  default=_NEVER)
        return max(least, one)
    # whole devices: clearing each takes every candidate on it; one candidate may hold several
    of_model = [c for model, c in room.clear.items()
                if wanted is None or wanted in model.casefold()]
    clear = of_model[0] if len(of_model) == 1 else sorted(n for c in of_model for n in c)
    k = res.gpu // cap
    if len(clear) < k:
        return _NEVER
    return max(least, -(-sum(clear[:k]) // room.widest))


_NEVER = 1 << 30  # more victims than any node has: it cannot be made to fit


def _count_to(need: int, amounts: list[int]) -> int:
    """The fewest of ``amounts`` (sorted largest first) adding up to ``need`` (``_NEVER``:
    none)."""
    if need <= 0:
        return 0
    total = 0
    for i, amount in enumerate(amounts, 1):
        total += amount
        if total >= need:
            return i
    return _NEVER


def _fewest(
    req: Request, node: Node, lower: list[Candidate], config: SchedulerConfig, now: float,
) -> tuple[Placement, list[Candidate]] | None:
    """The fewest of ``lower`` whose stop lets ``req`` fit on ``node``, and where it would go:
    candidates added cheapest first until it fits, then each dropped again if it still fits
    without it. (``schedule()`` decides each fit; a few comparisons rule out first what it
    would refuse anyway, which is most of the tries.)"""
    order = sorted(lower, key=lambda c: (c.rank, -c.since, c.id))
    trial = copy_node(node)
    chosen: list[Candidate] = []
    placement = None
    for c in order:
        _free(trial, c)
        chosen.append(c)
        if _room_of(node, chosen).could_fit(req):
            placement = _fits(req, trial, config, now)
            if placement is not None:
                break
    if placement is None:
        return None
    for c in list(chosen):
        without = [v for v in chosen if v is not c]
        if not _room_of(node, without).could_fit(req):
            continue
        trial = copy_node(node)
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
