"""The time-limit sweep: a RUNNING session with a time limit gets its end time (``ends_at``,
from the moment it became RUNNING), and is ended through ``lifecycle.transition`` (RUNNING →
TERMINATING, the reason kept: it ends TERMINATED with it) once that time has come."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.common.timelimits import format_limit
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow, StatusHistoryRow
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.services.lifecycle import transition

log = logging.getLogger(__name__)


async def sweep(sessionmaker: async_sessionmaker[AsyncSession],
                now: datetime | None = None) -> list[str]:
    """Give newly RUNNING sessions their end time, end those past it; the ids ended."""
    now = now or utcnow()
    async with sessionmaker() as db:
        await _set_ends(db)
        await db.commit()
        due = (await db.scalars(select(SessionRow).where(
            SessionRow.status == SessionStatus.RUNNING, SessionRow.ends_at <= now))).all()
        ended = []
        for row in due:
            assert row.time_limit is not None  # ends_at is only set with one
            reason = f"time limit reached ({format_limit(row.time_limit)})"
            try:
                await transition(db, row, SessionStatus.TERMINATING, reason)
                await db.commit()
            except (StaleStatus, IllegalTransition):
                await db.rollback()  # it ended or changed meanwhile: nothing to do
                continue
            ended.append(row.id)
    return ended


async def _set_ends(db: AsyncSession) -> None:
    """``ends_at`` = when it became RUNNING + its limit, for RUNNING sessions without one."""
    started = (
        select(func.max(StatusHistoryRow.at))
        .where(StatusHistoryRow.session_id == SessionRow.id,
               StatusHistoryRow.to_status == SessionStatus.RUNNING)
        .correlate(SessionRow)
        .scalar_subquery()
    )
    rows = (await db.execute(
        select(SessionRow.id, SessionRow.time_limit, started)
        .where(SessionRow.status == SessionStatus.RUNNING, SessionRow.time_limit.is_not(None),
               SessionRow.ends_at.is_(None))
    )).all()
    for session_id, limit, since in rows:
        if since is None:
            continue  # RUNNING without a history row: cannot happen through transition()
        await db.execute(
            update(SessionRow).where(SessionRow.id == session_id, SessionRow.ends_at.is_(None))
            .values(ends_at=since + timedelta(seconds=limit))
            .execution_options(synchronize_session=False)
        )
