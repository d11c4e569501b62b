"""Reclaiming idle and over-age sessions, and the countdown shown before (see ``idle.py``).

The reclaim pass reads every RUNNING session whose owner's policy has an idle rule or a
lifetime limit, decides with ``idle.decide``, and stops the due ones through
``lifecycle.transition`` (RUNNING → TERMINATING, the reason kept: the session ends TERMINATED
with it). A session that changed meanwhile (destroyed, ended) is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.monitoring import IdleRule
from gpuslice.common.schemas.sessions import ReclaimPublic, SessionStatus, SessionType
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ResourcePolicyRow,
    SessionRow,
    UsageSeriesRow,
    UserRow,
)
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.lifecycle import running_since, transition
from gpuslice.manager.services.monitoring.idle import Observed, Reclaim, decide
from gpuslice.manager.services.notify import enqueue as notify

log = logging.getLogger(__name__)


async def reclaim_pass(
    sessionmaker: async_sessionmaker[AsyncSession], max_gap: timedelta,
    now: datetime | None = None, warn_before: float = 0.0,
) -> list[str]:
    """Stop every session that is due; returns their ids. Those due within ``warn_before``
    seconds get a ``session.idle_warning`` notification (once per countdown)."""
    now = now or utcnow()
    async with sessionmaker() as db:
        found = await decisions(db, now, max_gap)
        due = [(sid, r) for sid, r in found if r.due(now)]
        for sid, r in found:
            if not r.due(now) and (r.at - now).total_seconds() <= warn_before:
                await notify.idle_warning(db, sid, now, r.at, r.kind, r.reason)
        await db.commit()
        stopped = []
        for session_id, reclaim in due:
            row = await db.scalar(select(SessionRow).where(
                SessionRow.id == session_id, SessionRow.status == SessionStatus.RUNNING))
            if row is None:
                continue
            try:
                await transition(db, row, SessionStatus.TERMINATING, reclaim.reason)
                record(db, "session.reclaim", actor="system:reclaim", target_type="session",
                       target_id=row.id, details={"kind": reclaim.kind, "owner": row.owner_id,
                                                  "reason": reclaim.reason})
                await db.commit()
            except (StaleStatus, IllegalTransition):
                await db.rollback()
                continue
            log.info("reclaimed session %s: %s", row.name, reclaim.reason)
            stopped.append(session_id)
    return stopped


async def countdown(
    db: AsyncSession, session_id: str, max_gap: timedelta, now: datetime | None = None
) -> ReclaimPublic | None:
    """When the session will be reclaimed if it goes on as it is (RUNNING sessions only)."""
    found = await decisions(db, now or utcnow(), max_gap, [session_id])
    if not found:
        return None
    reclaim = found[0][1]
    return ReclaimPublic(at=reclaim.at, kind=reclaim.kind, reason=reclaim.reason)


async def decisions(
    db: AsyncSession, now: datetime, max_gap: timedelta, ids: Sequence[str] | None = None
) -> list[tuple[str, Reclaim]]:
    """``(session id, when and why)`` for the RUNNING sessions (of ``ids``) that will be
    reclaimed if they go on as they are."""
    started = running_since()
    query = (
        select(SessionRow.id, SessionRow.type, SessionRow.gpu, SessionRow.last_activity_at,
               ResourcePolicyRow.idle_rule, ResourcePolicyRow.max_lifetime, UsageSeriesRow.last_at,
               UsageSeriesRow.gpu_idle_since, UsageSeriesRow.cpu_idle_since, started)
        .join(UserRow, UserRow.id == SessionRow.owner_id)
        .join(ResourcePolicyRow, ResourcePolicyRow.id == UserRow.policy_id)
        .outerjoin(UsageSeriesRow, UsageSeriesRow.session_id == SessionRow.id)
        .where(SessionRow.status == SessionStatus.RUNNING,
               or_(ResourcePolicyRow.idle_rule.is_not(None),
                   ResourcePolicyRow.max_lifetime.is_not(None)))
    )
    if ids is not None:
        query = query.where(SessionRow.id.in_(list(ids)))
    found = []
    for row in await db.execute(query):
        reclaim = _decide(row, now, max_gap)
        if reclaim is not None:
            found.append((row[0], reclaim))
    return found


def _decide(row: Any, now: datetime, max_gap: timedelta) -> Reclaim | None:
    (_sid, kind, gpu, activity, rule, lifetime, last_at, gpu_idle, cpu_idle, started) = row
    if started is None:
        return None  # RUNNING without a history row: cannot happen through transition()
    seen = Observed(
        now=now, running_since=_aware(started), batch=kind == SessionType.BATCH,
        has_gpu=gpu > 0, last_sample_at=last_at, gpu_idle_since=gpu_idle,
        cpu_idle_since=cpu_idle, last_activity_at=activity,
    )
    idle_rule = IdleRule.model_validate(rule) if rule else None
    return decide(idle_rule, lifetime, seen, max_gap)


def _aware(value: datetime) -> datetime:
    # In case a driver hands back the subquery's value without the column type (naive UTC).
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
