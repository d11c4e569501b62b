"""The cluster's free capacity during one scheduling pass, indexed for fast placement.

Devices are grouped by (pool, GPU model, device capacity, device memory), so that every device
of a group takes the same slice for a request by GPU memory. In each group, devices with free
capacity sit in buckets keyed by their free milli-fGPU, and nodes in buckets keyed by how many
entirely free devices they have. A placement is then a bisect plus a short walk instead of a scan
of every device. Within one pass capacity only shrinks (placements and holds), which is what lets
the caller cache a failed request shape for the rest of the pass.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler.model import (
    Device,
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
# re-indexes twice per placement): a device is (node rank, position) packed for binpack and
# (position, node rank) for spread, so the integer order is that tie-break; a node is its rank.
BucketKey = int
_POS_BITS = 16  # device positions on one node: fewer than 65,536
_RANK_BITS = 32  # nodes in one pass: fewer than 4 billion


@dataclass(slots=True)
class NodeState:
    """A working copy of one node: what is still free, and which devices are held."""

    node: Node
    rank: int
    cpu_free: int
    mem_free: int
    gpu_used: int
    groups: dict[GroupKey, list[int]] = field(default_factory=dict)  # group -> device positions
    held: set[int] = field(default_factory=set)  # device positions held for a waiting request
    device_groups: list[GroupIndex] = field(default_factory=list)  # by device position
    whole_counts: dict[GroupKey, int] = field(default_factory=dict)  # entirely free, not held

    def free(self, pos: int) -> int:
        return self.node.device_capacity - self.node.devices[pos].used

    def fits(self, cpu: int, mem: int) -> bool:
        return cpu <= self.cpu_free and mem <= self.mem_free

    def whole_free(self, group: GroupKey) -> list[int]:
        devices = self.node.devices
        return [p for p in self.groups[group] if devices[p].used == 0 and p not in self.held]


@dataclass(frozen=True, slots=True)
class Found:
    """A placement found in the working state, with where it sits (device positions)."""

    placement: Placement
    node: NodeState
    positions: list[int]


class GroupIndex:
    """Free capacity of one (pool, model, capacity, memory) group."""

    __slots__ = ("key", "cap", "mem", "slices", "amounts", "whole", "counts", "nodes")

    def __init__(self, key: GroupKey) -> None:
        self.key = key
        self.cap = key[2]
        self.mem = key[3]
        self.slices: dict[int, SortedList] = {}  # free milli-fGPU -> device keys
        self.amounts: list[int] = []  # the free amounts that have devices, sorted
        self.whole: dict[int, SortedList] = {}  # entirely free devices on a node -> ranks
        self.counts: list[int] = []  # sorted
        self.nodes: list[NodeState] = []  # nodes with devices in this group, by rank

    def gpu_of(self, req: Request, step: int) -> int | None:
        """The slice ``req`` takes on a device of this group (``None``: it cannot hold it)."""
        return request_gpu(req, self.mem, self.cap, step)

    def kind(self, gpu: int) -> int:
        """0: one slice of one device; k > 0: k whole devices; -1: not placeable here."""
        if gpu <= self.cap:
            return 0
        return gpu // self.cap if gpu % self.cap == 0 else -1


# A candidate placement: its score (lower is better), node, device positions and group.
Candidate = tuple[tuple[int, int], NodeState, list[int], GroupIndex]


def _add(
    buckets: dict[int, SortedList], present: list[int], amount: int, key: BucketKey
) -> None:
    bucket = buckets.get(amount)
    if bucket is None:
        bucket = buckets[amount] = SortedList()
        insort(present, amount)
    bucket.add(key)


def _remove(
    buckets: dict[int, SortedList], present: list[int], amount: int, key: BucketKey
) -> None:
    bucket = buckets[amount]
    bucket.remove(key)
    if not bucket:
        del buckets[amount]
        del present[bisect_left(present, amount)]


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

    def find(self, req: Request) -> Found | None:
        """The best placement for ``req`` under the strategy, or None if nothing fits now."""
        res = req.resources
        if res.gpu == 0 and not req.gpu_mem:
            ns = self._find_cpu_only(req.pool, res.cpu, res.mem)
            return None if ns is None else self._placement(req, ns, [], None)
        best: Candidate | None = None
        for group in self.matching_groups(req.pool, req.gpu_model):
            gpu = group.gpu_of(req, self.step)
            if gpu is None:
                continue  # a request by memory that these devices cannot hold
            k = group.kind(gpu)
            found = (
                self._find_slice(group, gpu, res.cpu, res.mem) if k == 0
                else self._find_whole(group, k, res.cpu, res.mem) if k > 0 else None
            )
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            return None
        _, ns, positions, group = best
        return self._placement(req, ns, positions, group)

    def _device_key(self, rank: int, pos: int) -> BucketKey:
        """The device's bucket key (``devices_at`` unpacks it)."""
        return (pos << _RANK_BITS) | rank if self.spread else (rank << _POS_BITS) | pos

    def devices_at(self, group: GroupIndex, amount: int) -> Iterator[tuple[int, int]]:
        """(node rank, device position) of the group's devices with ``amount`` free, best
        tie-break first."""
        if self.spread:
            mask = (1 << _RANK_BITS) - 1
            return ((key & mask, key >> _RANK_BITS) for key in group.slices[amount])
        mask = (1 << _POS_BITS) - 1
        return ((key >> _POS_BITS, key & mask) for key in group.slices[amount])

    # ------------------------------------------------------------ changes

    def allocate(self, found: Found) -> None:
        """Take the placement's capacity from the working state and re-index what changed."""
        ns, positions = found.node, found.positions
        before = self._indexed(ns, positions)
        for pos, piece in zip(positions, found.placement.slices, strict=True):
            ns.node.devices[pos].used += piece.gpu
            ns.gpu_used += piece.gpu
        ns.cpu_free -= found.placement.resources.cpu
        ns.mem_free -= found.placement.resources.mem
        self._reindex(ns, positions, before)

    def hold(self, ns: NodeState, positions: list[int], res: Resources) -> None:
        """Keep devices and cpu/mem of a node out of reach for the rest of the pass."""
        before = self._indexed(ns, positions)
        ns.held.update(positions)
        ns.cpu_free = max(0, ns.cpu_free - res.cpu)
        ns.mem_free = max(0, ns.mem_free - res.mem)
        self._reindex(ns, positions, before)  # held devices are left out of the index

    # ------------------------------------------------------------ helpers

    def _add_node(self, rank: int, node: Node) -> None:
        devices = [Device(d.index, d.uuid, d.model, d.mem, d.sms, d.used) for d in node.devices]
        copy = Node(
            node.id, node.name, node.cpu, node.mem, devices, node.device_capacity,
            node.cpu_used, node.mem_used, node.pool,
        )
        ns = NodeState(
            copy, rank, node.cpu - node.cpu_used, node.mem - node.mem_used,
            sum(d.used for d in devices),
        )
        if len(devices) >= 1 << _POS_BITS or rank >= 1 << _RANK_BITS:
            raise ValueError("a pass takes fewer than 65,536 devices per node and 2**32 nodes")
        for pos, dev in enumerate(devices):
            key = (node.pool, dev.model, node.device_capacity, dev.mem)
            ns.groups.setdefault(key, []).append(pos)
        self.nodes.append(ns)
        self.pool_nodes.setdefault(node.pool, []).append(ns)
        for key in ns.groups:
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = GroupIndex(key)
            group.nodes.append(ns)
        ns.device_groups = [
            self.groups[(node.pool, dev.model, node.device_capacity, dev.mem)] for dev in devices
        ]
        ns.whole_counts = {
            key: sum(1 for p in members if devices[p].used == 0)
            for key, members in ns.groups.items()
        }

    def _build_index(self) -> None:
        """Every group's buckets, built at once (sorting each bucket once is several times
        faster than adding keys one by one)."""
        slices: dict[GroupIndex, dict[int, list[int]]] = {g: {} for g in self.groups.values()}
        whole: dict[GroupIndex, dict[int, list[int]]] = {g: {} for g in self.groups.values()}
        for ns in self.nodes:
            cap, rank = ns.node.device_capacity, ns.rank
            for pos, dev in enumerate(ns.node.devices):
                if cap - dev.used > 0:
                    key = self._device_key(rank, pos)
                    slices[ns.device_groups[pos]].setdefault(cap - dev.used, []).append(key)
            for group_key, count in ns.whole_counts.items():
                if count:
                    whole[self.groups[group_key]].setdefault(count, []).append(rank)
        for group in self.groups.values():
            group.slices = {a: SortedList(keys) for a, keys in slices[group].items()}
            group.amounts = sorted(group.slices)
            group.whole = {c: SortedList(ranks) for c, ranks in whole[group].items()}
            group.counts = sorted(group.whole)

    def _indexed(self, ns: NodeState, positions: list[int]) -> list[int]:
        """The free amount each device is indexed under now (0: not indexed: full or held)."""
        devices, held, cap = ns.node.devices, ns.held, ns.node.device_capacity
        return [0 if p in held else cap - devices[p].used for p in positions]

    def _reindex(self, ns: NodeState, positions: list[int], before: list[int]) -> None:
        """Move the devices at ``positions`` (indexed under ``before``) to their buckets now,
        and the node in the buckets of entirely free devices where that count changed.

        Keys are static, so a change touches only the devices it changed. Among devices with
        the same free amount, binpack takes the lowest node rank first (filling nodes one after
        another); spread takes the lowest device position first and then the node rank, which
        deals new slices round-robin over the nodes. (The hot path of a pass: each placement
        comes here once.)"""
        cap, rank = ns.node.device_capacity, ns.rank
        now = self._indexed(ns, positions)
        counts: dict[GroupIndex, int] = {}  # group -> entirely free devices before the change
        for pos, was, free in zip(positions, before, now, strict=True):
            if was == free:
                continue
            group = ns.device_groups[pos]
            key = self._device_key(rank, pos)
            if was > 0:
                _remove(group.slices, group.amounts, was, key)
            if free > 0:
                _add(group.slices, group.amounts, free, key)
            if group not in counts:
                counts[group] = ns.whole_counts[group.key]
            # entirely free = indexed with the whole device free
            ns.whole_counts[group.key] += (free == cap) - (was == cap)
        for group, was_count in counts.items():
            count = ns.whole_counts[group.key]
            if count == was_count:
                continue
            if was_count:
                _remove(group.whole, group.counts, was_count, rank)
            if count:
                _add(group.whole, group.counts, count, rank)

    def _amounts(self, present: list[int], least: int) -> list[int]:
        # a copy: these lists are short (one entry per distinct free amount)
        start = bisect_left(present, least)
        fitting = present[start:]
        return fitting[::-1] if self.spread else fitting

    def _find_slice(
        self, group: GroupIndex, gpu: int, cpu: int, mem: int
    ) -> Candidate | None:
        for amount in self._amounts(group.amounts, gpu):
            for rank, pos in self.devices_at(group, amount):
                ns = self.nodes[rank]
                if ns.fits(cpu, mem):
                    return (self._score(amount - gpu, rank), ns, [pos], group)
        return None

    def _find_whole(
        self, group: GroupIndex, k: int, cpu: int, mem: int
    ) -> Candidate | None:
        for count in self._amounts(group.counts, k):
            for rank in group.whole[count]:
                ns = self.nodes[rank]
                if ns.fits(cpu, mem):
                    positions = ns.whole_free(group.key)[:k]
                    return (self._score((count - k) * group.cap, rank), ns, positions, group)
        return None

    def _find_cpu_only(self, pool: str, cpu: int, mem: int) -> NodeState | None:
        fitting = [ns for ns in self.pool_nodes.get(pool, ()) if ns.fits(cpu, mem)]
        if not fitting:
            return None
        return min(fitting, key=lambda ns: self._score(ns.cpu_free - cpu, ns.rank))

    def _score(self, leftover: int, rank: int) -> tuple[int, int]:
        """Lower is better: binpack wants the tightest fit, spread the loosest."""
        return (-leftover if self.spread else leftover, rank)

    def _placement(
        self, req: Request, ns: NodeState, positions: list[int], group: GroupIndex | None
    ) -> Found:
        gpu = 0 if group is None else group.gpu_of(req, self.step) or 0
        per_device = gpu if len(positions) <= 1 else ns.node.device_capacity
        slices = tuple(make_slice(ns.node, ns.node.devices[p], per_device) for p in positions)
        res = Resources(gpu, req.resources.cpu, req.resources.mem)
        return Found(Placement(req.id, ns.node.id, res, slices), ns, positions)
