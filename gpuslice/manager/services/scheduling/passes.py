"""The scheduling loop's pass: load the cluster, decide with the pure core, apply guarded.

load (one short read: ``snapshot.load_snapshot``) → ``schedule_with_holds()`` (the pure core,
no transaction open) → the placements in batches, each in one transaction through
``apply_placements`` (guarded; a lost race rolls the batch back, then its placements go one by
one through ``apply_placement``, so only those that lost roll back, and another pass is asked
for) → ``preemption.preempt`` for what still waits for capacity → pending reasons and queue
positions written only where they changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import StaleStatus
from gpuslice.manager.events import Hub
from gpuslice.manager.scheduler import PassResult, Policy, SchedulerConfig
from gpuslice.manager.scheduler.holds import schedule_with_holds
from gpuslice.manager.scheduler.reasons import after_preemption
from gpuslice.manager.services.scheduling import preemption
from gpuslice.manager.services.scheduling.allocation import (
    PlacementLost,
    apply_placement,
    apply_placements,
)
from gpuslice.manager.services.scheduling.snapshot import (
    Snapshot,
    alive_nodes,
    holds_of,
    load_snapshot,
)
from gpuslice.manager.services.timelimits.queue import attach_running, not_yet

log = logging.getLogger(__name__)
# Placements applied in one transaction. Bounded so that one batch's statements stay well
# within the databases' bound-parameter limits and a lost race costs little to redo.
BATCH = 200


@dataclass(slots=True)
class PassStats:
    placed: int = 0
    conflicts: int = 0
    waiting: int = 0


async def run_pass(
    sessionmaker: async_sessionmaker[AsyncSession], config: SchedulerConfig, hub: Hub
) -> PassStats:
    """One scheduling pass. Asks for another pass at once (``hub.scheduler``) after a lost race."""
    async with sessionmaker() as db:
        snap = await load_snapshot(db)
        if not snap.pending:
            return PassStats()
        now = utcnow()
        later = not_yet(snap.pending.values(), now)  # --begin: not in the queue yet
        requests = {r.id: r for r in snap.requests() if r.id not in later}
        if config.policy is Policy.BACKFILL and requests:
            await attach_running(db, snap.nodes, now)
            await db.commit()
        result = schedule_with_holds(
            list(requests.values()), snap.nodes, snap.users, config, now.timestamp(),
            holds_of(snap.pending), snap.projects,
        )
        stats = await _apply(db, snap, result)
        if result.waiting:
            # the cluster as this pass left it (read again only if it placed anything, and
            # only if some waiting session may preempt at all)
            nodes = alive_nodes if result.placements else None
            await preemption.preempt(db, result, snap, requests, nodes, config)
        result.waiting.update(later)
        await _write_waiting(db, snap, result)
    if stats.conflicts:
        hub.scheduler.set()
    return stats


async def _apply(db: AsyncSession, snap: Snapshot, result: PassResult) -> PassStats:
    """Placements in batches of ``BATCH``, each one transaction (a commit, and one wake-up of
    each node's long-poll, per batch rather than per placement). A batch that loses a race
    anywhere is rolled back whole and its placements applied one by one, so only those that
    really lost are lost."""
    stats = PassStats(waiting=len(result.waiting))
    names = {n.id: n.name for n in snap.nodes}
    placed = [(p, snap.pending[p.request_id]) for p in result.placements]
    for start in range(0, len(placed), BATCH):
        batch = placed[start:start + BATCH]
        if len(batch) > 1:  # (one placement alone goes the simpler way below)
            try:
                await apply_placements(db, batch, names, snap.devices)
                await db.commit()
                stats.placed += len(batch)
                continue
            except (PlacementLost, StaleStatus, DBAPIError) as exc:
                await db.rollback()
                log.info("a batch of %d placements lost a race (%s); placing them one by one",
                         len(batch), exc)
        for placement, row in batch:
            try:
                await apply_placement(
                    db, placement, row, names[placement.node_id], snap.devices
                )
                await db.commit()
                stats.placed += 1
            except (PlacementLost, StaleStatus, DBAPIError) as exc:
                # DBAPIError: a deadlock or check-constraint refusal on PostgreSQL; same meaning.
                await db.rollback()
                stats.conflicts += 1
                log.info("placement of %s lost a race: %s", row.id, exc)
    return stats


async def _write_waiting(db: AsyncSession, snap: Snapshot, result: PassResult) -> None:
    said = {
        w.request_id: after_preemption(snap.pending[w.request_id].preempt_reason, w.reason)
        for w in result.waiting.values()
    }
    changes = [
        {"sid": w.request_id, "reason": said[w.request_id], "code": str(w.code),
         "pos": w.position or None}
        for w in result.waiting.values()
        if _changed(snap.pending[w.request_id], said[w.request_id], str(w.code),
                    w.position or None)
    ]
    if not changes:
        return
    await db.execute(
        update(cast(Table, SessionRow.__table__))
        .where(SessionRow.id == bindparam("sid"), SessionRow.status == SessionStatus.PENDING)
        .values(
            status_reason=bindparam("reason"), wait_code=bindparam("code"),
            queue_position=bindparam("pos"),
        ),
        changes,
    )
    await db.commit()


def _changed(row: SessionRow, reason: str, code: str, position: int | None) -> bool:
    return (row.status_reason, row.wait_code, row.queue_position) != (reason, code, position)

