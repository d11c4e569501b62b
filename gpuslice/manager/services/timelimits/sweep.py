"""The time-limit sweep: a RUNNING session with a time limit gets its end time (``ends_at``,
from the moment it became RUNNING); ``warning`` seconds before it, the warning signal through
its node's agent (once: ``warned_at`` is set in the same guarded UPDATE that claims it, and a
line goes to its status history); at it, it is ended through ``lifecycle.transition``
(RUNNING → TERMINATING, the reason kept: it ends TERMINATED with it)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.durations import format_duration
from gpuslice.common.schemas.agents import SignalAsk
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.common.timelimits import format_limit
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import Conflict, IllegalTransition, StaleStatus
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.lifecycle import note, running_since, transition
from gpuslice.manager.services.notify import enqueue as notify

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WarnSignal:
    channel: Channel
    before: float  # seconds before the end
    signal: str  # e.g. SIGUSR1


async def sweep(sessionmaker: async_sessionmaker[AsyncSession], warning: WarnSignal,
                now: datetime | None = None) -> list[str]:
    """Give newly RUNNING sessions their end time, warn those near it, end those past it;
    the ids ended."""
    now = now or utcnow()
    async with sessionmaker() as db:
        await _set_ends(db)
        await db.commit()
        await _warn(db, warning, now)
        due = (await db.scalars(select(SessionRow).where(
            SessionRow.status == SessionStatus.RUNNING, SessionRow.ends_at <= now))).all()
        ended = []
        for row in due:
            assert row.time_limit is not None  # ends_at is only set with one
            reason = f"time limit reached ({format_limit(row.time_limit)})"
            try:
                await transition(db, row, SessionStatus.TERMINATING, reason)
                record(db, "session.time_limit", actor="system:timelimit",
                       target_type="session", target_id=row.id,
                       details={"owner": row.owner_id, "time_limit": row.time_limit})
                await db.commit()
            except (StaleStatus, IllegalTransition):
                await db.rollback()  # it ended or changed meanwhile: nothing to do
                continue
            ended.append(row.id)
    return ended


async def _warn(db: AsyncSession, warning: WarnSignal, now: datetime) -> None:
    """The warning signal to RUNNING sessions whose end is near, each once."""
    near = (await db.scalars(select(SessionRow).where(
        SessionRow.status == SessionStatus.RUNNING, SessionRow.warned_at.is_(None),
        SessionRow.ends_at <= now + timedelta(seconds=warning.before),
        SessionRow.ends_at > now,
    ))).all()
    for row in near:
        claimed = await db.execute(
            update(SessionRow).where(SessionRow.id == row.id, SessionRow.warned_at.is_(None))
            .values(warned_at=now).execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1 or row.node_id is None:  # type: ignore[attr-defined]
            await db.rollback()  # another replica warned it
            continue
        assert row.ends_at is not None
        left = format_duration(max(0, math.ceil((row.ends_at - now).total_seconds())))
        try:
            await note(db, row, f"{warning.signal} sent: its time limit ends in {left}")
            await notify.time_limit_warning(
                db, row.id, now, warning.signal,
                max(0, math.ceil((row.ends_at - now).total_seconds())))
        except StaleStatus:
            await db.rollback()
            continue
        await db.commit()
        try:  # after the commit: no request to an agent inside a transaction
            await warning.channel.post(row.node_id, SignalAsk(signal=warning.signal),
                                       timeout=60, session_id=row.id, about=f"session {row.name}")
        except Conflict as exc:  # its node is lost: nothing to signal
            log.info("no warning for session %s: %s", row.name, exc)


async def _set_ends(db: AsyncSession) -> None:
    """``ends_at`` = when it became RUNNING + its limit, for RUNNING sessions without one."""
    rows = (await db.execute(
        select(SessionRow.id, SessionRow.time_limit, running_since())
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

