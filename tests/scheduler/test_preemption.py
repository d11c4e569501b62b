"""Preemption's pure parts: choosing victims (``scheduler.preemption``) and passes with held
capacity (``scheduler.holds.schedule_with_holds``), unit and property tests.

The properties drive a small model of the manager: sessions are created, ended, preempted and
come back, in any order hypothesis picks; after every step no device, node or quota is over
its limit, no session is lost or placed twice, and no interactive session is preempted."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice.common.resources import Resources
from gpuslice.manager.scheduler import Node, Placement, Quota, Request, SchedulerConfig, UserState
from gpuslice.manager.scheduler.holds import Hold, schedule_with_holds
from gpuslice.manager.scheduler.model import WaitCode, copy_node, groups_of
from gpuslice.manager.scheduler.preemption import (
    Candidate,
    Preemption,
    Winner,
    _fewest,
    _free,
    _take,
    may_preempt,
    plan_preemptions,
)
from tests.scheduler.factories import apply, node, req

CONFIG = SchedulerConfig()


def running(rid: str, placement: Placement, rank: int = 0, since: float = 0.0) -> Candidate:
    return Candidate(rid, placement.node_id, rank, placement.resources,
                     tuple((s.index, s.gpu) for s in placement.slices), since)


def place(nodes: list[Node], *requests: Request) -> dict[str, Placement]:
    from gpuslice.manager.scheduler import schedule

    result = schedule(list(requests), nodes, {}, CONFIG, 0.0)
    apply(nodes, result.placements)
    return {p.request_id: p for p in result.placements}


def test_the_fewest_lowest_ranked_most_recent_victims_are_chosen() -> None:
    nodes = [node("n1", gpus=1, fgpu_per_gpu=4)]
    placed = place(nodes, req("old", 0.5, at=1), req("new", 0.5, at=2), req("mid", 1, at=3),
                   req("vip", 2, at=4))
    candidates = [running("old", placed["old"], 0, since=10.0),
                  running("new", placed["new"], 0, since=20.0),
                  running("mid", placed["mid"], 1, since=5.0),
                  running("vip", placed["vip"], 5, since=1.0)]
    [plan] = plan_preemptions([Winner(req("w", 0.5, at=9), 3)], candidates, nodes, CONFIG, 0.0)
    assert (plan.winner, plan.node_id, plan.victims) == ("w", "n1", ("new",))
    # a whole GPU: two half ones (rank 0) are enough; rank 1 and the higher rank 5 are kept
    [plan] = plan_preemptions([Winner(req("w", 1, at=9), 3)], candidates, nodes, CONFIG, 0.0)
    assert plan.victims == ("new", "old")
    # nothing of a lower rank to stop that would make room: no plan
    assert plan_preemptions([Winner(req("w", 3, at=9), 3)], candidates, nodes, CONFIG,
                            0.0) == []


def test_a_victim_serves_one_winner_and_a_later_winner_plans_on_what_is_left() -> None:
    nodes = [node("n1", gpus=1)]
    placed = place(nodes, req("low", 1))
    plans = plan_preemptions([Winner(req("w1", 1, at=1), 5), Winner(req("w2", 1, at=2), 5)],
                             [running("low", placed["low"])], nodes, CONFIG, 0.0)
    assert [(p.winner, p.victims) for p in plans] == [("w1", ("low",))]


def test_a_winner_of_several_groups_preempts_the_cheapest_victims_in_any_of_them() -> None:
    nodes = [node("a1", pool="a"), node("b1", pool="b"), node("c1", pool="c")]
    placed = place(nodes, req("two", 0.5, pool="a", at=1), req("two2", 0.5, pool="a", at=2),
                   req("one", 1, pool="b", at=3), req("other", 1, pool="c", at=4))
    candidates = [running(r, placed[r], 0, since=i) for i, r in enumerate(placed)]
    winner = req("w", 1, pool="a", pools={"a", "b"}, at=9)
    # one victim in "b" beats two in its own "a"; "c" is not a group it may use
    [plan] = plan_preemptions([Winner(winner, 1)], candidates, nodes, CONFIG, 0.0)
    assert (plan.node_id, plan.victims) == ("b1", ("one",))
    assert plan.placement.node_id == "b1"
    # a tie (one victim each) goes to its own group
    placed = place(nodes := [node("a1", pool="a"), node("b1", pool="b")],
                   req("x", 1, pool="a", at=1), req("y", 1, pool="b", at=2))
    candidates = [running("y", placed["y"], 0), running("x", placed["x"], 0)]
    winner = req("w", 1, pool="b", pools={"a", "b"}, at=9)
    [plan] = plan_preemptions([Winner(winner, 1)], candidates, nodes, CONFIG, 0.0)
    assert (plan.node_id, plan.victims) == ("b1", ("y",))
    # one group only: the other group's victims are never taken, even when cheaper
    only_a = req("w", 1, pool="a", at=9)
    [plan] = plan_preemptions([Winner(only_a, 1)], candidates, nodes, CONFIG, 0.0)
    assert plan.node_id == "a1"
    # ... and its held capacity in the other group is where the next pass places it
    hold = {"w": Hold("b1", Resources(0, winner.resources.cpu, winner.resources.mem),
                      ((0, 1000),))}
    nodes[1].devices[0].used = 0  # its victim is gone
    result = schedule_with_holds([winner], nodes, {}, CONFIG, 0.0, hold)
    assert [(p.request_id, p.node_id) for p in result.placements] == [("w", "b1")]


def test_equal_ranks_never_preempt_and_the_rules_protect_interactive_and_young() -> None:
    nodes = [node("n1", gpus=1)]
    placed = place(nodes, req("low", 1))
    assert plan_preemptions([Winner(req("w", 1), 0)], [running("low", placed["low"], 0)],
                            nodes, CONFIG, 0.0) == []
    assert may_preempt(True, 0, 1, False, 600, 600)
    assert not may_preempt(True, 0, 1, False, 599, 600)  # before its minimum runtime
    assert not may_preempt(False, 0, 1, False, 10**6, 0)  # interactive: never by default
    assert may_preempt(False, 0, 1, True, 0, 0)  # unless its class says so
    assert not may_preempt(True, 1, 1, False, 10**6, 0)


def test_held_capacity_goes_to_its_winner_only() -> None:
    """Half of a GPU freed by a victim already gone, the other half still stopping: a
    smaller request that would fit in the freed half waits, and the winner takes it all
    once the second victim is gone."""
    nodes = [node("n1", gpus=1)]
    hold = {"w": Hold("n1", Resources(0, 1000, 1024**3), ((0, 1000),))}
    place(nodes, req("stopping", 0.5))
    queue = [req("w", 1, at=5, priority=10), req("small", 0.5, at=1)]
    result = schedule_with_holds(queue, nodes, {}, CONFIG, 0.0, hold)
    assert result.placements == []
    assert result.waiting["w"].code is WaitCode.PREEMPTING
    assert result.waiting["small"].code is WaitCode.CAPACITY
    assert (result.waiting["w"].position, result.waiting["small"].position) == (1, 2)
    nodes = [node("n1", gpus=1)]  # the second victim is gone
    result = schedule_with_holds(queue, nodes, {}, CONFIG, 0.0, hold)
    assert [p.request_id for p in result.placements] == ["w"]


# ------------------------------------------------------------ the model


def _every_node(winners: list[Winner], candidates: list[Candidate], nodes: list[Node],
                now: float, limit: int = 16) -> list[Preemption]:
    """``plan_preemptions`` the plain way: ``_fewest`` on every node of every group a winner
    may use, the best by (victims, their highest rank, own group first, group, node)."""
    work = {n.id: n for n in nodes}
    left = list(candidates)
    plans: list[Preemption] = []
    for winner in winners:
        if len(plans) >= limit:
            break
        req = winner.request
        found = []
        for n in sorted(work.values(), key=lambda n: n.id):
            lower = [c for c in left if c.node_id == n.id and c.rank < winner.rank]
            if n.pool not in groups_of(req) or not lower:
                continue
            fit = _fewest(req, n, lower, CONFIG, now)
            if fit is not None:
                placement, victims = fit
                found.append(((len(victims), max(v.rank for v in victims), n.pool != req.pool,
                               n.pool, n.id), placement, victims))
        if not found:
            continue
        _, placement, victims = min(found, key=lambda f: f[0])
        plans.append(Preemption(req.id, placement.node_id, tuple(sorted(v.id for v in victims)),
                                placement))
        node = work[placement.node_id] = copy_node(work[placement.node_id])
        for v in victims:
            _free(node, v)
            left.remove(v)
        _take(node, placement)
    return plans


@dataclass
class Session:
    request: Request
    rank: int
    batch: bool
    state: str = "pending"  # pending | running | stopping | ended
    placement: Placement | None = None
    preempted_by: str | None = None
    preemptions: int = 0


@dataclass
class World:
    nodes: list[Node]
    quota: Quota
    sessions: dict[str, Session] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    ended_by_user: set[str] = field(default_factory=set)
    clock: float = 0.0

    def cluster(self) -> list[Node]:
        """The nodes with what running and stopping sessions hold (the allocations)."""
        fresh = [Node(n.id, n.name, n.cpu, n.mem, [
            type(d)(d.index, d.uuid, d.model, d.mem, d.sms) for d in n.devices
        ], n.device_capacity, pool=n.pool) for n in self.nodes]
        apply(fresh, [s.placement for s in self.sessions.values()
                      if s.state in ("running", "stopping") and s.placement])
        return fresh

    def users(self) -> dict[str, UserState]:
        states: dict[str, UserState] = {}
        for s in self.sessions.values():
            if s.state in ("running", "stopping") and s.placement:
                u = states.setdefault(s.request.user, UserState(self.quota))
                u.sessions += 1
                r = s.placement.resources
                u.used = Resources(u.used.gpu + r.gpu, u.used.cpu + r.cpu, u.used.mem + r.mem)
        for user in ("alice", "bob"):
            states.setdefault(user, UserState(self.quota))
        return states

    def scheduling_pass(self) -> None:
        self.clock += 1
        pending = [s for s in self.sessions.values() if s.state == "pending"]
        holds = {k: v for k, v in self.holds.items() if self.sessions[k].state == "pending"}
        nodes = self.cluster()
        result = schedule_with_holds([s.request for s in pending], nodes, self.users(),
                                     CONFIG, self.clock, holds)
        for p in result.placements:
            s = self.sessions[p.request_id]
            assert s.state == "pending", "placed twice"
            s.state, s.placement = "running", p
            self.holds.pop(p.request_id, None)
        waiting = [self.sessions[w.request_id] for w in result.waiting.values()
                   if w.code is WaitCode.CAPACITY and w.request_id not in self.holds]
        candidates = [
            running(s.request.id, s.placement, s.rank) for s in self.sessions.values()
            if s.state == "running" and s.placement
            and may_preempt(s.batch, s.rank, 10**6, False, 10**6, 0)
        ]
        winners = [Winner(s.request, s.rank) for s in sorted(waiting, key=lambda s: -s.rank)]
        plans = plan_preemptions(winners, candidates, self.cluster(), CONFIG, self.clock)
        # its shortcuts change no answer: the same as trying every node of every group
        assert plans == _every_node(winners, candidates, self.cluster(), self.clock)
        for plan in plans:
            self.holds[plan.winner] = Hold(
                plan.node_id, Resources(0, plan.placement.resources.cpu,
                                        plan.placement.resources.mem),
                tuple((x.index, x.gpu) for x in plan.placement.slices))
            pool = next(n.pool for n in self.nodes if n.id == plan.node_id)
            assert pool in groups_of(self.sessions[plan.winner].request), "a group it may not use"
            for v in plan.victims:
                victim = self.sessions[v]
                assert victim.state == "running" and victim.rank < self.sessions[plan.winner].rank
                victim.state, victim.preempted_by = "stopping", plan.winner

    def stopped(self, sid: str) -> None:
        """Its node reports its container gone."""
        s = self.sessions[sid]
        if s.preempted_by is not None:  # back in the queue, in its place
            s.state, s.placement, s.preempted_by = "pending", None, None
            s.preemptions += 1
        else:
            s.state, s.placement = "ended", None

    def end(self, sid: str) -> None:
        s = self.sessions[sid]
        self.ended_by_user.add(sid)
        if s.state == "pending":
            s.state = "ended"
        elif s.state == "running":
            s.state = "stopping"
        elif s.state == "stopping":
            s.preempted_by = None  # its owner's stop: it ends, not back in the queue

    def check(self) -> None:
        for n in self.cluster():
            assert n.cpu_used <= n.cpu and n.mem_used <= n.mem
            for d in n.devices:
                assert 0 <= d.used <= n.device_capacity, f"{n.id} GPU {d.index} over capacity"
        for user, u in self.users().items():
            assert self.quota.max_gpu is None or u.used.gpu <= self.quota.max_gpu, user
        pools = {n.id: n.pool for n in self.nodes}
        for sid, s in self.sessions.items():
            if s.placement is not None and s.state in ("running", "stopping"):
                assert pools[s.placement.node_id] in groups_of(s.request), f"{sid} off its groups"
            if s.state == "ended":
                assert sid in self.ended_by_user, f"{sid} was lost"
            if not s.batch:
                assert s.preempted_by is None and s.preemptions == 0, "interactive preempted"


ops = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 3), st.booleans(),
              st.sampled_from(["0.25", "0.5", "1", "2"]), st.sampled_from(["alice", "bob"]),
              st.sampled_from(["a", "b", "a,b", "b,a"])),
    st.tuples(st.just("end"), st.integers(0, 40)),
    st.tuples(st.just("stopped"), st.integers(0, 40)),
    st.tuples(st.just("pass"),),
), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops, st.sampled_from([None, 3000]))
def test_preemption_never_loses_doubles_or_over_allocates(
    steps: list[tuple], max_gpu: int | None
) -> None:
    """Over two resource groups ("a": n1 and n3, "b": n2), requests of one group or of both:
    a winner may preempt in any group it may use and in no other."""
    world = World([node("n1", gpus=2, fgpu_per_gpu=1, pool="a"),
                   node("n2", gpus=1, fgpu_per_gpu=2, pool="b"),
                   node("n3", gpus=1, fgpu_per_gpu=1, pool="a")],
                  Quota(max_gpu=max_gpu))
    for step in steps:
        ids = sorted(world.sessions)
        if step[0] == "create":
            _, rank, batch, gpu, user, where = step
            sid = f"s{len(world.sessions):02d}"
            groups = where.split(",")
            world.sessions[sid] = Session(
                req(sid, gpu, user=user, at=float(len(world.sessions)), priority=rank * 1000,
                    pool=groups[0], pools=set(groups) if len(groups) > 1 else None),
                rank, batch)
        elif step[0] == "end" and ids:
            world.end(ids[step[1] % len(ids)])
        elif step[0] == "stopped":
            stopping = [i for i in ids if world.sessions[i].state == "stopping"]
            if stopping:
                world.stopped(stopping[step[1] % len(stopping)])
        else:
            world.scheduling_pass()
        world.check()
    # once every stop is done, the queue settles: no hold is left for nothing
    for _ in range(6):
        for sid in sorted(world.sessions):
            if world.sessions[sid].state == "stopping":
                world.stopped(sid)
        world.scheduling_pass()
        world.check()
