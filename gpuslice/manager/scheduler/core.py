"""The scheduler core: one pure, deterministic pass from a queue and a cluster to placements.

See README.md beside this file for the policies' exact semantics.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import groupby
from operator import attrgetter

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.model import (
    Node,
    PassResult,
    Placement,
    Policy,
    Request,
    Running,
    SchedulerConfig,
    UserState,
    WaitCode,
    Waiting,
    groups_of,
)
from gpuslice.manager.scheduler.reasons import (
    HELD_AHEAD,
    QuotaOver,
    Usage,
    capacity_reason,
    fifo_wait,
    held_for_it,
    model_block,
    quota_over,
    quota_words,
)
from gpuslice.manager.scheduler.reservations import (
    Hold,
    hold_start,
    place_in_hold,
    ran_from,
    take_from_hold,
)
from gpuslice.manager.scheduler.state import BucketKey, ClusterState, Found, GroupIndex, NodeState

# (pool or pools, GPU model, fGPU, cpu, memory, GPU memory): requests of one shape fit or fail
# alike
Shape = tuple[str | frozenset[str], str | None, int, int, int, int]
# Outcomes whose text is written at the end of the pass: one shared tuple each, not one per
# waiting request (a pass leaves up to the whole queue waiting).
_FIFO = (WaitCode.FIFO, "")
_CAPACITY = (WaitCode.CAPACITY, "")
# A request's outcome: its code and reason, or for a quota wait whose quota (None: the user's,
# else the project's name) and by how much, put in words at the end of the pass.
Outcome = tuple[WaitCode, str | tuple[str | None, QuotaOver]]


def queue_order(queue: Iterable[Request]) -> list[Request]:
    """Priority first (higher first), then the time it was queued, then its id."""
    # Least significant key first: each sort is stable (``reverse`` too), so it keeps the
    # previous order among its ties. Three sorts on plain attributes are 2-2.5x faster than one
    # on a tuple built by a lambda per request (100,000 requests: 65 ms instead of 125 shuffled).
    order = sorted(queue, key=attrgetter("id"))
    order.sort(key=attrgetter("enqueued_at"))
    order.sort(key=attrgetter("priority"), reverse=True)
    return order


def schedule(
    queue: Sequence[Request],
    nodes: Sequence[Node],
    users: Mapping[str, UserState],
    config: SchedulerConfig,
    now: float,
    projects: Mapping[str, UserState] | None = None,
) -> PassResult:
    """Decide which queued requests start now and where; say why every other one waits.

    ``projects``: each project's quota and usage by its name (``Request.project``); a project
    absent from it is unlimited. Pure: the inputs are not changed, and the same inputs give
    the same result.
    """
    with _collector_paused():
        state = ClusterState(nodes, config.strategy, config.fgpu_step)
        run = _Pass(state, users, config, now, projects or {})
        order = queue_order(queue)
        if config.policy is Policy.DRF:
            run.drf(order)
        else:
            run.in_order(order)
        return run.result(order)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off while a pass runs, and on again after.

    A pass makes no reference cycles (tested), so a collection during it can free nothing the
    pass made. But what it keeps (its working state, and a ``Placement``, its ``DeviceSlice``s
    and their tuple per placement) sets off two or three full collections per pass at 10,000
    nodes x 100,000 requests, each a walk over every object in the process (in the manager,
    every row loaded too): a fifth of the pass, more on a busy machine. Reference counting
    frees objects as usual meanwhile, and the collector runs at the first allocation after.
    A collector someone else turned off is left off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Pass:
    """The working state of one pass: cluster, user usage, and what happened to each request."""

    def __init__(
        self, state: ClusterState, users: Mapping[str, UserState], config: SchedulerConfig,
        now: float, projects: Mapping[str, UserState],
    ) -> None:
        self.state = state
        self.config = config
        self.now = now
        self.users = _usages(users)
        # only projects with a quota: a request of any other project skips the check
        self.projects = _usages(projects)
        self.placed: PassResult = PassResult()
        self.outcome: dict[str, Outcome] = {}  # request id -> code, quota wait
        self.failed: set[Shape] = set()
        self.holds: dict[str, Hold] = {}  # request id -> capacity held for it
        self.head_held: set[str] = set()  # pools whose first waiting request holds capacity
        # backfill: what this pass placed on each node (by rank), for when a hold there will be
        # free; kept as the placements themselves (their ends are worked out only for a node
        # that gets a hold: a few per pass)
        self.started: defaultdict[int, list[Placement]] | None = (
            defaultdict(list) if config.policy is Policy.BACKFILL else None
        )
        self.limits: dict[str, float | None] | None = None  # request id -> its time limit
        self.order: list[Request] = []
        self.blocked: dict[str, str] = {}  # pool -> id of the request blocking it (fifo)

    # ------------------------------------------------------------ policies

    def in_order(self, order: list[Request]) -> None:
        """fifo and backfill: walk the queue once in order."""
        self.order = order
        fifo = self.config.policy is Policy.FIFO
        for req in order:
            # (one pool, the usual case, inline: this runs for every request of the queue)
            if fifo and (req.pool in self.blocked if req.pools is None else self._behind(req)):
                self.outcome[req.id] = _FIFO
                continue
            if self.try_place(req) is not None or self.outcome[req.id][0] is WaitCode.QUOTA:
                continue  # a quota wait is its user's or project's own: it holds up nobody else
            if fifo:
                for pool in groups_of(req):
                    self.blocked.setdefault(pool, req.id)
            elif self._may_hold(req):
                self._hold_for(req)

    def drf(self, order: list[Request]) -> None:
        """Dominant resource fairness within each priority level, highest level first."""
        totals = _share_scales(self._cluster_totals())
        for _, tier in groupby(order, key=lambda r: r.priority):
            per_user: dict[str, deque[Request]] = defaultdict(deque)
            for req in tier:
                per_user[req.user].append(req)
            heap = [(self._share(uid, totals), uid) for uid in sorted(per_user)]
            heapq.heapify(heap)
            while heap:
                uid = heap[0][1]  # the top stays put while its request is tried
                pending = per_user[uid]
                placed = self.try_place(pending.popleft()) is not None
                if not pending:
                    heapq.heappop(heap)
                elif placed:  # its new share in place of the old: one sift, not two
                    heapq.heapreplace(heap, (self._share(uid, totals), uid))
                # placed nothing: its share is the same, so it stays on top for its next one

    def _behind(self, req: Request) -> bool:
        """fifo: whether an earlier request waits for capacity in a group ``req`` could use."""
        if req.pools is None:
            return req.pool in self.blocked
        return any(pool in self.blocked for pool in req.pools)

    # ------------------------------------------------------------ one request

    def try_place(self, req: Request) -> Found | None:
        """Place ``req`` if its quota and the cluster allow; record why not otherwise."""
        user = self.users.get(req.user)
        # By GPU memory the slice depends on the device: its smallest one counts for the quota
        # until a device is found, then the slice found there.
        want = self._least(req) if req.gpu_mem else req.resources
        if user is not None and user.limited and self._quota_blocks(req, want, user):
            return None
        project = None if req.project is None else self.projects.get(req.project)
        if project is not None and project.limited and self._quota_blocks(
                req, want, project, req.project):
            return None
        shape = _shape(req)
        found = None if shape in self.failed else self.state.find(req)
        held: Hold | None = None
        if found is None:
            # capacity only shrinks during a pass, so this shape cannot fit later in it either
            self.failed.add(shape)
            backfill = (
                place_in_hold(self.state, list(self.holds.values()), req, self.now)
                if self.holds and req.time_limit is not None else None
            )
            if backfill is None:
                self.outcome[req.id] = _CAPACITY
                return None
            found, held = backfill
        got = found.placement.resources
        if req.gpu_mem and got != want and self._larger_blocks(req, got, user, project):
            return None  # the slice on the device found is larger than the least one
        model = found.group.key[1] if found.group is not None else None
        if project is not None and model is not None and project.quota.gpu_models:
            blocked = model_block(got.gpu, model, project, f"project {req.project}")
            if blocked is not None:  # (the GPU found is of a model the project has used up)
                self.outcome[req.id] = (WaitCode.QUOTA, blocked)
                return None
        if held is None:
            self.state.allocate(found)
        else:
            take_from_hold(held, found)
        self.placed.placements.append(found.placement)
        if self.started is not None:
            self.started[found.node.rank].append(found.placement)
        if user is None:
            user = self.users[req.user] = Usage()
        user.add(got)
        if project is not None:
            project.add(got, model)
        return found

    def _larger_blocks(
        self, req: Request, got: Resources, user: Usage | None, project: Usage | None
    ) -> bool:
        return (user is not None and user.limited and self._quota_blocks(req, got, user)) or (
            project is not None and project.limited
            and self._quota_blocks(req, got, project, req.project)
        )

    def _quota_blocks(
        self, req: Request, want: Resources, usage: Usage, project: str | None = None
    ) -> bool:
        """Whether ``usage``'s quota (the user's, or ``project``'s) keeps ``req`` waiting."""
        over = quota_over(want, usage)
        if over is not None:
            self.outcome[req.id] = (WaitCode.QUOTA, (project, over))
        return over is not None

    def _least(self, req: Request) -> Resources:
        """A request by GPU memory with the smallest slice any matching device would give."""
        amounts = [
            gpu for g in self.state.groups_for(req)
            if (gpu := g.gpu_of(req, self.state.step)) is not None
        ]
        return Resources(min(amounts, default=0), req.resources.cpu, req.resources.mem)

    def _may_hold(self, req: Request) -> bool:
        """Backfill: the first request of its pool that does not fit (``reserve_head``), and
        any that waited past ``max_wait_before_reserve``, hold capacity, up to a bound."""
        if len(self.holds) >= self.config.max_reservations:
            return False
        head = self.config.reserve_head and req.pool not in self.head_held
        return head or self.now - req.enqueued_at > self.config.max_wait_before_reserve

    def _hold_for(self, req: Request) -> None:
        """Backfill: keep the capacity closest to fitting ``req`` from later requests, and
        work out when it will be enough (``reservations.hold_start``)."""
        target = self._reservation_target(req)
        if target is None:
            return
        ns = target.node
        cpu, mem = ns.cpu_free, ns.mem_free
        self.state.hold(ns, target.positions, req.resources)
        target.cpu, target.mem = cpu - ns.cpu_free, mem - ns.mem_free
        need = self._hold_need(req, target)
        running = [*ns.node.running, *self._started_on(ns)]
        target.start = hold_start(target, need, req.resources, running, self.now)
        self.holds[req.id] = target
        self.head_held.add(req.pool)

    def _started_on(self, ns: NodeState) -> list[Running]:
        """What this pass placed on ``ns``, each until its time limit."""
        assert self.started is not None  # holds are made under backfill only
        placed = self.started.get(ns.rank, ())
        if not placed:
            return []
        if self.limits is None:
            self.limits = {r.id: r.time_limit for r in self.order}
        return [ran_from(p, self.limits[p.request_id], self.now) for p in placed]

    def _hold_need(self, req: Request, hold: Hold) -> list[int]:
        """The milli-fGPU ``req`` needs on each held device."""
        if not hold.positions:
            return []
        group = hold.node.device_groups[hold.positions[0]]
        gpu = group.gpu_of(req, self.state.step) or group.cap
        return [gpu] if len(hold.positions) == 1 and gpu <= group.cap else (
            [group.cap] * len(hold.positions))

    def _reservation_target(self, req: Request) -> Hold | None:
        """The capacity closest to fitting ``req``: the freest device, or the node with the most
        entirely free devices, among those that could hold it when empty."""
        res = req.resources
        if res.gpu == 0 and not req.gpu_mem:
            nodes = [ns for ns in self.state.nodes_for(req) if _could_host(ns, res)]
            best = max(nodes, key=lambda ns: (ns.cpu_free, ns.mem_free, -ns.rank), default=None)
            return None if best is None else Hold(best, [])
        candidates: list[tuple[tuple[int, int], Hold]] = []
        for group in self.state.groups_for(req):
            gpu = group.gpu_of(req, self.state.step)
            if gpu is None:
                continue
            k = group.kind(gpu)
            hold = (
                self._freest_device(group, res) if k == 0
                else self._freest_node(group, k, res) if k > 0 else None
            )
            if hold is not None:
                freed = sum(hold.node.free[p] for p in hold.positions)
                candidates.append(((-freed, hold.node.rank), hold))
        return min(candidates, key=lambda c: c[0])[1] if candidates else None

    def _freest_device(self, group: GroupIndex, res: Resources) -> Hold | None:
        state = self.state

        def could_host(key: BucketKey) -> bool:
            return _could_host(state.nodes[state.device_at(key)[0]], res)

        for amount in reversed(group.slices.amounts):
            key = group.slices.first(amount, could_host)
            if key is not None:
                rank, pos = state.device_at(key)
                return Hold(state.nodes[rank], [pos])
        for ns in state.nodes_of(group):  # every device is full: hold the first that could fit
            free = [p for p in ns.positions(group) if p not in ns.held]
            if free and _could_host(ns, res):
                return Hold(ns, free[:1])
        return None

    def _freest_node(self, group: GroupIndex, k: int, res: Resources) -> Hold | None:
        nodes = self.state.nodes
        for count in reversed(group.whole.amounts):  # the most entirely free devices first
            rank = group.whole.first(count, lambda rank: _could_host(nodes[rank], res))
            if rank is not None:
                return Hold(nodes[rank], self._freest(nodes[rank], group, k))
        best: tuple[tuple[int, int], Hold] | None = None
        for ns in self.state.nodes_of(group):  # no device entirely free: the most free fGPU
            if _could_host(ns, res) and len(ns.positions(group)) - len(ns.held) >= k:
                chosen = self._freest(ns, group, k)
                score = (-sum(ns.free[p] for p in chosen), ns.rank)
                if len(chosen) == k and (best is None or score < best[0]):
                    best = (score, Hold(ns, chosen))
        return None if best is None else best[1]

    @staticmethod
    def _freest(ns: NodeState, group: GroupIndex, k: int) -> list[int]:
        free = [p for p in ns.positions(group) if p not in ns.held]
        return sorted(free, key=lambda p: (-ns.free[p], p))[:k]

    # ------------------------------------------------------------ fairness

    def _cluster_totals(self) -> Resources:
        gpu = sum(ns.node.device_capacity * len(ns.node.devices) for ns in self.state.nodes)
        cpu = sum(ns.node.cpu for ns in self.state.nodes)
        mem = sum(ns.node.mem for ns in self.state.nodes)
        return Resources(gpu, cpu, mem)

    def _share(self, uid: str, scales: tuple[int, int, int]) -> int:
        """The user's dominant share, times a common multiple of the totals (``_share_scales``):
        an integer that orders users exactly as the fractions would, at a fraction of the cost
        (a pass compares shares once per request)."""
        user = self.users.get(uid)
        if user is None:
            return 0
        return max(user.gpu * scales[0], user.cpu * scales[1], user.mem * scales[2])

    # ------------------------------------------------------------ result

    def result(self, order: list[Request]) -> PassResult:
        """Attach a reason and a queue position (per pool, 1-based) to every waiting request."""
        positions: dict[str, int] = defaultdict(int)
        explained: dict[Shape, tuple[WaitCode, str]] = {}
        worded: dict[tuple[str | None, QuotaOver], str] = {}
        held_pools = {h.node.node.pool for h in self.holds.values()}
        for req in order:
            if req.id not in self.outcome:
                continue
            positions[req.pool] += 1
            position = positions[req.pool]
            code, why = self.outcome[req.id]
            if isinstance(why, str):
                text = why
            else:  # a quota wait: in words once per distinct one
                text = worded.get(why) or worded.setdefault(why, quota_words(*why))
            if code is WaitCode.FIFO:
                text = fifo_wait(position - 1)
            elif code is WaitCode.CAPACITY:
                shape = _shape(req)
                if shape not in explained:
                    explained[shape] = capacity_reason(self.state, req)
                code, text = explained[shape]
                text += self._hold_note(req, held_pools)
            self.placed.waiting[req.id] = Waiting(req.id, code, text, position)
        return self.placed

    def _hold_note(self, req: Request, held_pools: set[str]) -> str:
        hold = self.holds.get(req.id)
        if hold is not None:
            devices = hold.node.node.devices
            free_in = hold.start - self.now if math.isfinite(hold.start) else None
            return held_for_it(hold.node.node.name, [devices[p].index for p in hold.positions],
                               free_in)
        if req.pool in held_pools or (req.pools is not None and not held_pools.isdisjoint(
                req.pools)):
            return HELD_AHEAD
        return ""


def _usages(states: Mapping[str, UserState]) -> dict[str, Usage]:
    """Plain counters of what each user (or project) uses, added to as the pass places."""
    return {
        key: Usage(u.quota, u.sessions, u.used.gpu, u.used.cpu, u.used.mem,
                   dict(u.used_models) if u.used_models else None)
        for key, u in states.items()
    }


def _share_scales(totals: Resources) -> tuple[int, int, int]:
    """``L // total`` per resource, ``L`` the least common multiple of the totals: ``part *
    scale`` is then ``part / total * L`` exactly, so shares compare as integers. A resource the
    cluster has none of counts for nothing (scale 0)."""
    wholes = (totals.gpu, totals.cpu, totals.mem)
    common = math.lcm(*(w for w in wholes if w > 0))  # (1 for none)
    gpu, cpu, mem = (common // w if w > 0 else 0 for w in wholes)
    return gpu, cpu, mem


def _shape(req: Request) -> Shape:
    res = req.resources
    return (req.pools or req.pool, req.gpu_model, res.gpu, res.cpu, res.mem, req.gpu_mem)


def _could_host(ns: NodeState, res: Resources) -> bool:
    """Whether the node could hold ``res`` in cpu and memory once it is empty."""
    return ns.node.cpu >= res.cpu and ns.node.mem >= res.mem
