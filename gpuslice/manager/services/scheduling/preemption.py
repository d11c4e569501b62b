"""Preemption in the scheduling pass: held capacity, choosing victims, and stopping them.

A pass (``passes.run_pass``) schedules through ``schedule_with_holds`` and, once its
placements are applied, calls ``preempt``:

1. ``preempt`` takes the requests still waiting for capacity whose class outranks some RUNNING
   session that may be preempted (a batch session past its class's minimum runtime, or an
   interactive one of a class marked ``preempt_interactive``), lets the pure
   ``scheduler.preemption.plan_preemptions`` choose the fewest victims, and in one transaction
   per winner records the winner's hold (``held_node_id``, ``held_slices``: guarded by
   ``held_node_id IS NULL``, so two schedulers never both preempt for one winner) and moves
   each victim RUNNING → TERMINATING through ``transition()`` with the reason ("preempted by
   a session of another user (priority high)", or "by your session train-3" when one user's
   session preempts another of theirs: no one learns another user's session names from a
   reason) and ``preempted_by``. Its agent stops it with its class's
   grace (SIGTERM, then SIGKILL).
2. When the agent reports the victim's container gone, ``nodes.reports`` moves it TERMINATING
   → PENDING (its ``created_at`` unchanged: its place in the queue), which releases its
   capacity and wakes the scheduler at once.
3. ``schedule_with_holds`` places a holding winner first, on its held node only, and lets no
   other request use what it holds; once placed, the hold is cleared with its PENDING status.
   A hold whose victims are all gone and which still cannot be placed is dropped (it may then
   preempt again), so capacity is never held for nothing.

Every step is a line in the sessions' status histories: the victim's TERMINATING and PENDING,
the winner's note naming its victims, and its SCHEDULED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only

from gpuslice.common.resources import Resources
from gpuslice.common.schemas.sessions import SessionStatus, SessionType
from gpuslice.manager.db.models import AllocationRow, SessionRow
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.scheduler import (
    Node,
    PassResult,
    Request,
    SchedulerConfig,
    UserState,
    WaitCode,
    Waiting,
    queue_order,
    schedule,
)
from gpuslice.manager.scheduler.preemption import (
    Candidate,
    Winner,
    may_preempt,
    plan_preemptions,
)
from gpuslice.manager.scheduler.reasons import preempting
from gpuslice.manager.services.lifecycle import note, transition
from gpuslice.manager.services.priorities import NONE, ClassRule

if TYPE_CHECKING:
    from gpuslice.manager.services.scheduling.passes import Snapshot

log = logging.getLogger(__name__)
# Winners one pass may preempt for (each its own transaction); the rest wait for the next pass.
MAX_PER_PASS = 16


@dataclass(frozen=True, slots=True)
class Hold:
    """Capacity held for a winner on one node: its cpu and memory, and its planned slices."""

    node_id: str
    resources: Resources
    slices: tuple[tuple[int, int], ...]


def holds_of(pending: Mapping[str, SessionRow]) -> dict[str, Hold]:
    """The holds of the PENDING sessions (winners whose victims are stopping)."""
    return {
        row.id: Hold(row.held_node_id, Resources(0, row.cpu, row.mem),
                     tuple((int(i), int(g)) for i, g in row.held_slices or ()))
        for row in pending.values() if row.held_node_id is not None
    }


def schedule_with_holds(
    requests: Sequence[Request], nodes: Sequence[Node], users: Mapping[str, UserState],
    config: SchedulerConfig, now: float, holds: Mapping[str, Hold],
    projects: Mapping[str, UserState] | None = None,
) -> PassResult:
    """``schedule()``, with each hold's capacity kept for its winner: winners are tried first,
    each on its held node only; what they hold and did not take yet is used by no one else.
    ``projects``: the projects' quotas and usage by name, as ``schedule()`` takes them."""
    by_id = {n.id: n for n in nodes}
    holders = [r for r in queue_order(requests) if r.id in holds and holds[r.id].node_id in by_id]
    if not holders:
        return schedule(requests, nodes, users, config, now, projects)
    projects = dict(projects or {})
    held_on = {holds[r.id].node_id for r in holders}
    work = {node_id: _copy(by_id[node_id]) for node_id in held_on}
    users = dict(users)
    placed = PassResult()
    left: list[Request] = []
    for i, req in enumerate(holders):
        node = work[holds[req.id].node_id]
        view = _copy(node)
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


async def still_stopping(db: AsyncSession, pending: Sequence[SessionRow]) -> set[str]:
    """Of the PENDING winners holding capacity, those with a victim still stopping, read with
    them (one consistent view: a victim's requeue releases its capacity in the same
    transaction)."""
    holders = [row.id for row in pending if row.held_node_id is not None]
    if not holders:
        return set()
    found = await db.scalars(
        select(SessionRow.preempted_by).distinct()
        .where(SessionRow.preempted_by.in_(holders),
               SessionRow.status == SessionStatus.TERMINATING)
    )
    return {winner for winner in found if winner is not None}


async def preempt(
    db: AsyncSession, result: PassResult, snap: Snapshot, requests: Mapping[str, Request],
    reload: Callable[[AsyncSession], Awaitable[list[Node]]] | None, config: SchedulerConfig,
) -> int:
    """Preempt for what waits for capacity; drop holds left for nothing. The winners' waiting
    reasons in ``result`` are updated to say so; ``reload``: reads the nodes again (this pass
    placed some), else the snapshot's are current. Returns how many winners preempted."""
    pending, classes = snap.pending, snap.classes
    await _drop_stale_holds(db, result, pending, snap.stopping)
    waiting = [
        row for row in pending.values()
        if row.held_node_id is None
        and (w := result.waiting.get(row.id)) is not None and w.code is WaitCode.CAPACITY
    ]
    ranks = {row.id: _rule(classes, row.priority_class).rank for row in waiting}
    lowest = min((c.rank for c in classes.values()), default=0)
    winners = [row for row in waiting if ranks[row.id] > min(lowest, 0)]
    if not winners:
        return 0
    now = time.time()
    candidates, victims = await _candidates(db, classes, max(ranks.values()), now)
    if not candidates:
        return 0
    nodes = snap.nodes if reload is None else await reload(db)
    await db.commit()
    holding_now = holds_of({k: row for k, row in pending.items() if k in result.waiting})
    nodes = _with_holds(nodes, holding_now.values())  # a new winner never plans on another's hold
    plans = plan_preemptions(
        [Winner(r, ranks[r.id]) for r in queue_order([requests[row.id] for row in winners])],
        candidates, nodes, config, now, MAX_PER_PASS,
    )
    done = 0
    names = {n.id: n.name for n in nodes}
    for plan in plans:
        winner = pending[plan.winner]
        held = [[s.index, s.gpu] for s in plan.placement.slices]
        chosen = [victims[v] for v in plan.victims]
        if await _apply(db, winner, plan.node_id, names[plan.node_id], held, chosen):
            done += 1
            w = result.waiting[winner.id]
            result.waiting[winner.id] = Waiting(
                w.request_id, WaitCode.PREEMPTING, preempting(names[plan.node_id]), w.position)
    return done


def victim_reason(winner: SessionRow, victim: SessionRow) -> str:
    """A victim's reason, as its owner reads it: the winner is named only to its own owner
    ("preempted by your session train-3 (priority high)")."""
    klass = winner.priority_class or "default"
    if winner.owner_id == victim.owner_id:
        return f"preempted by your session {winner.name} (priority {klass})"
    return f"preempted by a session of another user (priority {klass})"


def victims_named(winner: SessionRow, victims: Sequence[SessionRow]) -> str:
    """The victims as the winner's owner reads them: their own by name, others' counted."""
    own = [v.name for v in victims if v.owner_id == winner.owner_id]
    others = len(victims) - len(own)
    if others:
        own.append(f"{others} session{'s' if others > 1 else ''} of other users")
    return ", ".join(own)


# ------------------------------------------------------------ helpers


async def _apply(
    db: AsyncSession, winner: SessionRow, node_id: str, node_name: str, held: list[list[int]],
    victims: list[SessionRow],
) -> bool:
    """The winner's hold and its victims' stop, all in one transaction, or nothing."""
    try:
        got = await db.execute(
            update(SessionRow)
            .where(SessionRow.id == winner.id, SessionRow.status == SessionStatus.PENDING,
                   SessionRow.held_node_id.is_(None))
            .values(held_node_id=node_id, held_slices=held)
            .execution_options(synchronize_session=False)
        )
        if got.rowcount != 1:  # type: ignore[attr-defined]
            raise StaleStatus(f"session {winner.name} is placed or preempting already")
        for victim in victims:
            reason = victim_reason(winner, victim)
            await transition(db, victim, SessionStatus.TERMINATING, reason,
                             preempted_by=winner.id, preempt_reason=reason)
        names = victims_named(winner, victims)
        await note(db, winner, f"preempting {names} on node {node_name}: waiting for "
                               f"{'it' if len(victims) == 1 else 'them'} to stop; the capacity "
                               "is held for it")
        await db.commit()
    except (StaleStatus, IllegalTransition) as exc:
        await db.rollback()
        log.info("preemption for %s not applied: %s", winner.id, exc)
        return False
    # The whole story for admins (the reasons above tell each owner only their own part).
    log.info("session %s (%s) preempts %s on node %s", winner.id, winner.priority_class,
             ", ".join(v.id for v in victims), node_name)
    return True


async def _candidates(
    db: AsyncSession, classes: Mapping[str, ClassRule], below: int, now: float,
) -> tuple[list[Candidate], dict[str, SessionRow]]:
    """RUNNING sessions of a rank below ``below`` that may be preempted now."""
    lower = [name for name, rule in classes.items() if rule.rank < below]
    of_lower: ColumnElement[bool] = SessionRow.priority_class.in_(lower)
    if NONE.rank < below:  # sessions of no class rank as 0
        of_lower = or_(of_lower, SessionRow.priority_class.is_(None))
    rows = (await db.scalars(
        select(SessionRow).options(_VICTIM_COLUMNS)
        .where(SessionRow.status == SessionStatus.RUNNING, SessionRow.node_id.is_not(None),
               of_lower)
    )).all()
    eligible = [row for row in rows if _preemptible(row, _rule(classes, row.priority_class),
                                                    below, now)]
    if not eligible:
        return [], {}
    slices: dict[str, list[tuple[int, int]]] = {}
    for sid, index, gpu in await db.execute(
        select(AllocationRow.session_id, AllocationRow.device_index, AllocationRow.gpu)
        .where(AllocationRow.session_id.in_([r.id for r in eligible]),
               AllocationRow.released_at.is_(None))
    ):
        slices.setdefault(sid, []).append((index, gpu))
    await db.commit()
    db.expunge_all()
    out = [
        Candidate(row.id, str(row.node_id), _rule(classes, row.priority_class).rank,
                  Resources(sum(g for _, g in slices.get(row.id, ())), row.cpu, row.mem),
                  tuple(sorted(slices.get(row.id, ()))),
                  row.running_since.timestamp() if row.running_since else 0.0)
        for row in eligible
    ]
    return out, {row.id: row for row in eligible}


_VICTIM_COLUMNS = load_only(
    SessionRow.id, SessionRow.name, SessionRow.owner_id, SessionRow.type, SessionRow.status,
    SessionRow.node_id, SessionRow.cpu, SessionRow.mem, SessionRow.priority_class,
    SessionRow.running_since, raiseload=True,
)


def _preemptible(row: SessionRow, rule: ClassRule, below: int, now: float) -> bool:
    since = row.running_since.timestamp() if row.running_since else now
    return may_preempt(row.type == SessionType.BATCH, rule.rank, below,
                       rule.preempt_interactive, now - since, rule.min_runtime_s)


async def _drop_stale_holds(
    db: AsyncSession, result: PassResult, pending: Mapping[str, SessionRow],
    stopping: set[str],
) -> None:
    """Holds whose victims were all gone when the pass read the cluster, and whose winner
    still did not fit on what that freed: dropped, so capacity is never held for nothing (the
    winner may preempt again). Judged on the pass's own view, never on a later one: a victim
    gone since then freed capacity this pass did not see."""
    holders = [row for row in pending.values()
               if row.held_node_id is not None and row.id in result.waiting]
    stale = [r.id for r in holders if r.id not in stopping]
    if stale:
        await db.execute(
            update(SessionRow)
            .where(SessionRow.id.in_(stale), SessionRow.status == SessionStatus.PENDING)
            .values(held_node_id=None, held_slices=None)
            .execution_options(synchronize_session=False))
        for row in holders:
            if row.id in stale:
                row.held_node_id = None
    await db.commit()


def _rule(classes: Mapping[str, ClassRule], name: str | None) -> ClassRule:
    return classes.get(name, NONE) if name is not None else NONE


def ranked(rank: int, priority: int) -> int:
    """The queue's priority: the class's rank first, then the session's own priority."""
    return rank * 1000 + priority


def _with_holds(nodes: Sequence[Node], holds: Iterable[Hold]) -> list[Node]:
    by_node: dict[str, list[Hold]] = {}
    for hold in holds:
        by_node.setdefault(hold.node_id, []).append(hold)
    out = []
    for node in nodes:
        if node.id in by_node:
            node = _copy(node)
            for hold in by_node[node.id]:
                _add(node, hold)
        out.append(node)
    return out


def _copy(node: Node) -> Node:
    return replace(node, devices=[replace(d) for d in node.devices])


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
