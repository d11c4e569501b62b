"""The cluster's free capacity during one scheduling pass, indexed for fast placement.

Devices are grouped by (pool, GPU model, device capacity, device memory), so that every device
of a group takes the same slice for a request by GPU memory. In each group, devices with free
capacity are filed by their free milli-fGPU, and nodes by how many entirely free devices they
have (``Buckets``, sorted by the strategy's tie-break). A placement is then a bisect and a short
walk instead of a scan of every device. Within one pass capacity only shrinks (placements and
holds), which is what lets the caller cache a failed request shape for the rest of the pass.

The working state is kept small on purpose (a few objects per node, none per placement that
outlives it) and free of reference cycles, so that reference counting frees it as soon as the
pass ends: the pass runs with CPython's cyclic collector paused (``core._collector_paused``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from sortedcontainers import SortedList

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.model import (
    DeviceSlice,
    Node,
    Placement,
    Request,
    Strategy,
    make_slice,
    request_gpu,
)

# (pool, model, device capacity in milli-fGPU, device memory in bytes)
GroupKey = tuple[str, str, int, int]
# Bucket keys are plain integers (they compare several times faster than tuples, and a pass
# files a key again on every placement): a device is (node rank, position) packed for binpack
# and (position, node rank) for spread, so the integer order is that tie-break; a node is its
# rank.
BucketKey = int
_POS_BITS = 16  # device positions on one node: fewer than 65,536
_RANK_BITS = 32  # nodes in one pass: fewer than 4 billion
_POS_MASK = (1 << _POS_BITS) - 1
_RANK_MASK = (1 << _RANK_BITS) - 1


class Buckets:
    """Integer keys filed under a positive amount, each amount's keys in a sorted list.

    ``at`` says where each key is filed, so moving a key needs no search for its old amount.
    (Heaps with lazy deletion make a move cheaper, but a walk past keys that do not fit then
    pops and pushes back each one: 2-2.5x slower than this when many nodes have free GPUs and
    no free memory.)
    """

    __slots__ = ("lists", "amounts", "at")

    def __init__(self, entries: dict[int, list[BucketKey]]) -> None:
        """``entries``: amount -> its keys."""
        # one sort per bucket: several times faster than adding the keys one by one
        self.lists: dict[int, SortedList] = {a: SortedList(keys) for a, keys in entries.items()}
        self.amounts: list[int] = sorted(self.lists)  # the amounts that have keys, sorted
        self.at: dict[BucketKey, int] = {
            key: amount for amount, keys in entries.items() for key in keys
        }

    def move(self, key: BucketKey, amount: int) -> None:
        """File ``key`` under ``amount`` from now on (0: under none)."""
        was = self.at.pop(key, 0)
        if was:
            bucket = self.lists[was]
            bucket.remove(key)
            if not bucket:
                del self.lists[was]
                del self.amounts[bisect_left(self.amounts, was)]
        if amount > 0:
            self.at[key] = amount
            bucket = self.lists.get(amount)
            if bucket is None:
                bucket = self.lists[amount] = SortedList()
                insort(self.amounts, amount)
            bucket.add(key)

    def first(
        self, amount: int, fits: Callable[[BucketKey], bool] | None = None
    ) -> BucketKey | None:
        """The least key filed under ``amount`` for which ``fits`` holds (None: none)."""
        bucket = self.lists.get(amount)
        if bucket is None:
            return None
        if fits is None:
            return bucket[0]
        for key in bucket:
            if fits(key):
                return key
        return None

    def amount_of(self, key: BucketKey) -> int:
        """The amount ``key`` is filed under now (0: none)."""
        return self.at.get(key, 0)

    def keys_from(self, least: int) -> list[BucketKey]:
        """Every key filed under ``least`` or more now, in no particular order."""
        return [key for key, amount in self.at.items() if amount >= least]

    def largest(self) -> tuple[int, BucketKey] | None:
        """The largest amount any key is filed under now, and its least key."""
        if not self.amounts:
            return None
        amount = self.amounts[-1]
        return amount, self.lists[amount][0]


class GroupIndex:
    """Free capacity of one (pool, model, capacity, memory) group."""

    __slots__ = ("key", "cap", "mem", "slices", "whole", "ranks")

    def __init__(self, key: GroupKey) -> None:
        self.key = key
        self.cap = key[2]
        self.mem = key[3]
        self.slices = Buckets({})  # device keys by free milli-fGPU (held devices: none)
        self.whole = Buckets({})  # node ranks by entirely free devices not held
        # Ranks, not NodeStates, of the nodes with devices in this group, in order: a node
        # refers to its groups, and a reference back would make the working state a cycle
        # that only the garbage collector could free, well after the pass.
        self.ranks: list[int] = []

    def gpu_of(self, req: Request, step: int) -> int | None:
        """The slice ``req`` takes on a device of this group (``None``: it cannot hold it)."""
        return request_gpu(req, self.mem, self.cap, step)

    def kind(self, gpu: int) -> int:
        """0: one slice of one device; k > 0: k whole devices; -1: not placeable here."""
        if gpu <= self.cap:
            return 0
        return gpu // self.cap if gpu % self.cap == 0 else -1


@dataclass(slots=True, eq=False)
class NodeState:
    """A working view of one node: what is still free, and which devices are held. The input
    ``node`` is only read; what the pass takes is counted here.

    Kept to a few objects: a pass makes one per node and they live to its end, so each one
    more is 10,000 more for the garbage collector to walk at 10,000 nodes. (How many devices
    of a group are entirely free is ``group.whole.amount_of(rank)``.)"""

    node: Node
    rank: int
    cpu_free: int
    mem_free: int
    free: list[int]  # free milli-fGPU by device position
    keys: tuple[BucketKey, ...]  # bucket key by device position
    device_groups: tuple[GroupIndex, ...]  # by device position
    # device positions held for a waiting request: replaced, never changed in place, so that
    # the nodes without any (nearly all) share the one empty set
    held: frozenset[int] = frozenset()

    def fits(self, cpu: int, mem: int) -> bool:
        return cpu <= self.cpu_free and mem <= self.mem_free

    def positions(self, group: GroupIndex) -> list[int]:
        """The node's devices in ``group``."""
        return [p for p, g in enumerate(self.device_groups) if g is group]

    def whole_free(self, group: GroupIndex) -> list[int]:
        free, held, cap = self.free, self.held, group.cap
        return [p for p in self.positions(group) if free[p] == cap and p not in held]


@dataclass(slots=True, eq=False)
class Found:
    """A placement found in the working state, with where it sits (device positions)."""

    placement: Placement
    node: NodeState
    positions: list[int]
    group: GroupIndex | None  # None: a request for no GPU


# A candidate placement: its score (lower is better), node, device positions, group, and the
# slice per request (milli-fGPU) on that group's devices.
Candidate = tuple[tuple[int, int], NodeState, list[int], GroupIndex, int]


class ClusterState:
    """Nodes, their free capacity and the group indexes for one pass. Inputs are not mutated."""

    def __init__(self, nodes: Sequence[Node], strategy: Strategy, step: int = 10) -> None:
        self.strategy = strategy
        self.spread = strategy is Strategy.SPREAD  # read on every placement: once here
        self.step = step  # milli-fGPU: what a request by GPU memory is rounded up to
        self.nodes: list[NodeState] = []
        self.groups: dict[GroupKey, GroupIndex] = {}
        self.pool_nodes: dict[str, list[NodeState]] = {}
        self._match_cache: dict[tuple[str, str | None], list[GroupIndex]] = {}
        self._multi_cache: dict[tuple[frozenset[str], str | None], list[GroupIndex]] = {}
        self._multi_nodes: dict[frozenset[str], list[NodeState]] = {}
        for rank, node in enumerate(sorted(nodes, key=lambda n: n.id)):
            self._add_node(rank, node)
        self._build_index()

    # ------------------------------------------------------------ queries

    def matching_groups(self, pool: str, model: str | None) -> list[GroupIndex]:
        """Groups in ``pool`` whose model contains ``model`` (case-insensitive), in key order."""
        cache_key = (pool, model)
        found = self._match_cache.get(cache_key)
        if found is None:
            wanted = model.casefold() if model else None
            found = [
                g for k, g in sorted(self.groups.items())
                if k[0] == pool and (wanted is None or wanted in k[1].casefold())
            ]
            self._match_cache[cache_key] = found
        return found

    def groups_for(self, req: Request) -> list[GroupIndex]:
        """The groups of every resource group (pool) ``req`` may use whose model matches."""
        if req.pools is None:  # the usual case: one pool, no new list
            return self.matching_groups(req.pool, req.gpu_model)
        key = (req.pools, req.gpu_model)
        found = self._multi_cache.get(key)
        if found is None:
            found = [g for p in sorted(req.pools) for g in self.matching_groups(p, req.gpu_model)]
            found.sort(key=lambda g: g.key)
            self._multi_cache[key] = found
        return found

    def nodes_for(self, req: Request) -> list[NodeState]:
        """The nodes of every resource group (pool) ``req`` may use, by rank."""
        if req.pools is None:
            return self.pool_nodes.get(req.pool, [])
        found = self._multi_nodes.get(req.pools)
        if found is None:  # once per set of groups: reasons ask for each request shape
            found = [ns for p in req.pools for ns in self.pool_nodes.get(p, ())]
            found.sort(key=attrgetter("rank"))
            self._multi_nodes[req.pools] = found
        return found

    def find(self, req: Request) -> Found | None:
        """The best placement for ``req`` under the strategy, or None if nothing fits now."""
        res = req.resources
        if res.gpu == 0 and not req.gpu_mem:
            ns = self._find_cpu_only(req, res.cpu, res.mem)
            return None if ns is None else self._placement(req, ns, [], None, 0)
        best: Candidate | None = None
        for group in self.groups_for(req):
            gpu = group.gpu_of(req, self.step) if req.gpu_mem else res.gpu
            if gpu is None:
                continue  # a request by memory that these devices cannot hold
            k = group.kind(gpu)
            found = (
                self._find_slice(group, gpu, res.cpu, res.mem) if k == 0
                else self._find_whole(group, gpu, k, res.cpu, res.mem) if k > 0 else None
            )
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            return None
        _, ns, positions, group, gpu = best
        return self._placement(req, ns, positions, group, gpu)

    def nodes_of(self, group: GroupIndex) -> list[NodeState]:
        """The nodes with devices in ``group``, by rank."""
        return [self.nodes[rank] for rank in group.ranks]

    def device_at(self, key: BucketKey) -> tuple[int, int]:
        """(node rank, device position) of a device's bucket key."""
        if self.spread:
            return key & _RANK_MASK, key >> _RANK_BITS
        return key >> _POS_BITS, key & _POS_MASK

    # ------------------------------------------------------------ changes

    def allocate(self, found: Found) -> None:
        """Take the placement's capacity from the working state and re-file what changed.

        (The hot path of a pass: each placement comes here once.)"""
        ns, placement, group = found.node, found.placement, found.group
        ns.cpu_free -= placement.resources.cpu
        ns.mem_free -= placement.resources.mem
        if group is None:
            return
        free, cap, lost = ns.free, group.cap, 0
        for pos, piece in zip(found.positions, placement.slices, strict=True):
            was = free[pos]
            free[pos] = was - piece.gpu
            group.slices.move(ns.keys[pos], was - piece.gpu)
            lost += was == cap
        if lost:
            self._lose_whole(ns, group, lost)

    def hold(self, ns: NodeState, positions: list[int], res: Resources) -> None:
        """Keep devices and cpu/mem of a node out of reach for the rest of the pass."""
        ns.cpu_free = max(0, ns.cpu_free - res.cpu)
        ns.mem_free = max(0, ns.mem_free - res.mem)
        for pos in positions:
            if pos in ns.held:
                continue
            ns.held = ns.held | {pos}
            group = ns.device_groups[pos]
            group.slices.move(ns.keys[pos], 0)  # held devices are left out of the index
            if ns.free[pos] == group.cap:
                self._lose_whole(ns, group, 1)

    # ------------------------------------------------------------ helpers

    def _add_node(self, rank: int, node: Node) -> None:
        devices, cap = node.devices, node.device_capacity
        if len(devices) >= 1 << _POS_BITS or rank >= 1 << _RANK_BITS:
            raise ValueError("a pass takes fewer than 65,536 devices per node and 2**32 nodes")
        positions = range(len(devices))
        keys = tuple(
            (p << _RANK_BITS) | rank if self.spread else (rank << _POS_BITS) | p
            for p in positions
        )
        device_groups = []
        for dev in devices:
            key = (node.pool, dev.model, cap, dev.mem)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = GroupIndex(key)
            device_groups.append(group)
        ns = NodeState(
            node, rank, node.cpu - node.cpu_used, node.mem - node.mem_used,
            [cap - d.used for d in devices], keys, tuple(device_groups),
        )
        for group in dict.fromkeys(device_groups):  # each group once, in device order
            group.ranks.append(rank)
        self.nodes.append(ns)
        self.pool_nodes.setdefault(node.pool, []).append(ns)

    def _build_index(self) -> None:
        """Every group's buckets, built at once (one sort per bucket)."""
        slices: dict[GroupIndex, dict[int, list[int]]] = {g: {} for g in self.groups.values()}
        whole: dict[GroupIndex, dict[int, list[int]]] = {g: {} for g in self.groups.values()}
        for ns in self.nodes:
            counts: dict[GroupIndex, int] = {}  # entirely free devices per group
            for pos, free in enumerate(ns.free):
                group = ns.device_groups[pos]
                if free > 0:
                    slices[group].setdefault(free, []).append(ns.keys[pos])
                if free == group.cap:
                    counts[group] = counts.get(group, 0) + 1
            for group, count in counts.items():
                whole[group].setdefault(count, []).append(ns.rank)
        for group in self.groups.values():
            group.slices = Buckets(slices[group])
            group.whole = Buckets(whole[group])

    def _lose_whole(self, ns: NodeState, group: GroupIndex, lost: int) -> None:
        """``lost`` of the node's devices in ``group`` are no longer entirely free (or held)."""
        group.whole.move(ns.rank, group.whole.amount_of(ns.rank) - lost)

    def _amounts(self, present: list[int], least: int) -> list[int]:
        """The amounts of at least ``least`` in the strategy's order (a copy: these lists are
        short, one entry per distinct free amount)."""
        fitting = present[bisect_left(present, least):]
        return fitting[::-1] if self.spread else fitting

    def _find_slice(
        self, group: GroupIndex, gpu: int, cpu: int, mem: int
    ) -> Candidate | None:
        nodes = self.nodes
        spread = self.spread

        def fits(key: BucketKey) -> bool:
            # the node's rank decoded here, not by ``device_at``: this runs per device walked
            ns = nodes[key & _RANK_MASK if spread else key >> _POS_BITS]
            return cpu <= ns.cpu_free and mem <= ns.mem_free

        for amount in self._amounts(group.slices.amounts, gpu):
            key = group.slices.first(amount, fits)
            if key is not None:
                rank, pos = self.device_at(key)
                return (self._score(amount - gpu, rank), nodes[rank], [pos], group, gpu)
        return None

    def _find_whole(
        self, group: GroupIndex, gpu: int, k: int, cpu: int, mem: int
    ) -> Candidate | None:
        nodes = self.nodes

        def fits(rank: int) -> bool:
            return cpu <= nodes[rank].cpu_free and mem <= nodes[rank].mem_free

        for count in self._amounts(group.whole.amounts, k):
            rank = group.whole.first(count, fits)
            if rank is not None:
                ns = nodes[rank]
                positions = ns.whole_free(group)[:k]
                return (self._score((count - k) * group.cap, rank), ns, positions, group, gpu)
        return None

    def _find_cpu_only(self, req: Request, cpu: int, mem: int) -> NodeState | None:
        fitting = [ns for ns in self.nodes_for(req) if ns.fits(cpu, mem)]
        if not fitting:
            return None
        return min(fitting, key=lambda ns: self._score(ns.cpu_free - cpu, ns.rank))

    def _score(self, leftover: int, rank: int) -> tuple[int, int]:
        """Lower is better: binpack wants the tightest fit, spread the loosest."""
        return (-leftover if self.spread else leftover, rank)

    def _placement(
        self, req: Request, ns: NodeState, positions: list[int], group: GroupIndex | None,
        gpu: int,
    ) -> Found:
        """``gpu``: what the request takes in all (0 for none)."""
        node = ns.node
        if len(positions) == 1:
            slices: tuple[DeviceSlice, ...] = (make_slice(node, node.devices[positions[0]], gpu),)
        else:  # whole devices (or none)
            cap = node.device_capacity
            slices = tuple(make_slice(node, node.devices[p], cap) for p in positions)
        res = req.resources
        if gpu != res.gpu:  # by GPU memory: the slice chosen on this device
            res = Resources(gpu, res.cpu, res.mem)
        # otherwise the request's own (immutable) Resources: one object fewer per placement
        return Found(Placement(req.id, node.id, res, slices), ns, positions, group)
