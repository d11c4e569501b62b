"""Preemption in the scheduling pass: held capacity, choosing victims, and stopping them.

A pass (``passes.run_pass``) schedules through the pure core's ``schedule_with_holds``
(``scheduler/holds.py``), with the holds ``snapshot.holds_of`` reads from the PENDING sessions'
rows, and, once its placements are applied, calls ``preempt``:

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
from collections.abc import Awaitable, Callable, Mapping, Sequence

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
    WaitCode,
    Waiting,
    queue_order,
)
from gpuslice.manager.scheduler.holds import with_holds
from gpuslice.manager.scheduler.preemption import (
    MAX_PER_PASS,
    Candidate,
    Winner,
    may_preempt,
    plan_preemptions,
)
from gpuslice.manager.scheduler.reasons import preempting
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.lifecycle import note, transition
from gpuslice.manager.services.priorities import NONE, ClassRule
from gpuslice.manager.services.scheduling.snapshot import Snapshot, holds_of

log = logging.getLogger(__name__)


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
    nodes = with_holds(nodes, holding_now.values())  # a new winner never plans on another's hold
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
            record(db, "session.preempt", actor="system:scheduler", target_type="session",
                   target_id=victim.id, details={
                       "owner": victim.owner_id, "winner": winner.id, "node": node_name,
                       "winner_class": winner.priority_class or "default"})
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
