"""One session's usage: now, its totals, its history at a chosen step, its reclaim countdown.

Answered from the database alone (never from the node), so it works after the session ended
and its node is gone; the in-session endpoint relays the same answer to the session itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.durations import parse_duration
from gpuslice.common.resources import ResourceError
from gpuslice.common.schemas.monitoring import SessionStats, UsageTotals
from gpuslice.common.schemas.sessions import SessionPublic, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NodeRow, SessionRow, UsageSeriesRow, UserRow
from gpuslice.manager.errors import InvalidRequest, NotFound
from gpuslice.manager.services.monitoring.history import (
    Timed,
    bucketed,
    now_of,
    points,
    steady,
    totals,
)
from gpuslice.manager.services.monitoring.reclaim import countdown
from gpuslice.manager.services.monitoring.samples import SERIES
from gpuslice.manager.services.sessions import views

TARGET_POINTS = 120  # the default step gives about this many
MAX_POINTS = 5000
MAX_STEP = 86400


async def session_stats(
    db: AsyncSession, row: SessionRow, *, since: str | None, step: int | None,
    max_gap: timedelta,
) -> SessionStats:
    """``row``'s usage; ``since`` is a duration back from now (``2h``) or an ISO time, by
    default the session's first sample; ``step`` seconds per point (a multiple of 60)."""
    now = utcnow()
    owner = await db.scalar(select(UserRow.username).where(UserRow.id == row.owner_id))
    mine = select(UsageSeriesRow).where(UsageSeriesRow.session_id == row.id).execution_options(
        populate_existing=True)
    first_at = await db.scalar(select(UsageSeriesRow.first_at).where(
        UsageSeriesRow.session_id == row.id))
    start = _since(since, now, first_at or row.created_at) // 60 * 60
    until = int(now.timestamp()) // 60 * 60 + 60  # the open minute included
    step = _step(step, until - start)

    async def read() -> tuple[UsageSeriesRow | None, list[Timed], UsageTotals]:
        series = await db.scalar(mine)
        found = await points(db, series, start, until) if series is not None else []
        return series, found, await totals(db, series)

    series, found, total = await steady(db, SERIES.c.session_id == row.id, read)
    reclaim = None
    if row.status == SessionStatus.RUNNING:
        reclaim = await countdown(db, row.id, max_gap, now)
    answer = SessionStats(
        session_id=row.id, name=row.name, owner=owner or row.owner_id,
        status=SessionStatus(row.status), now=now_of(series), totals=total,
        step=step, since=datetime.fromtimestamp(start, UTC),
        points=bucketed(found, start, step), reclaim=reclaim,
    )
    await db.commit()
    return answer


async def describe(db: AsyncSession, row: SessionRow, max_gap: timedelta) -> SessionPublic:
    """One session as ``sessions.views.describe`` shows it, with its reclaim countdown."""
    public = await views.describe(db, row.id)
    if public.status is SessionStatus.RUNNING:
        public.reclaim = await countdown(db, row.id, max_gap)
        await db.commit()
    return public


async def stats_for_node(
    db: AsyncSession, node: NodeRow, session_id: str, *, since: str | None, step: int | None,
    max_gap: timedelta,
) -> SessionStats:
    """:func:`session_stats` of a session placed on ``node`` (the in-session endpoint asks
    for its own); another node's session is answered like an unknown one."""
    row = await db.scalar(
        select(SessionRow).where(SessionRow.id == session_id, SessionRow.node_id == node.id)
    )
    if row is None:
        raise NotFound(f"session {session_id} is not on this node", field="session_id")
    return await session_stats(db, row, since=since, step=step, max_gap=max_gap)


def _since(text: str | None, now: datetime, first: datetime) -> int:
    if text is None or text == "":
        return int(first.timestamp())
    try:
        return int((now - timedelta(seconds=parse_duration(text, field="since"))).timestamp())
    except ResourceError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            f"since: {text!r} is neither a duration (30m, 2h, 7d) nor an ISO time "
            "(2026-01-31T12:00:00Z)", field="since",
        ) from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())


def _step(step: int | None, span: int) -> int:
    span = max(span, 60)
    if step is None:
        return max(60, -(-span // TARGET_POINTS // 60) * 60)
    if step < 60 or step > MAX_STEP or step % 60:
        raise InvalidRequest("step: a multiple of 60 seconds, from 60 to 86400", field="step")
    if span // step > MAX_POINTS:
        raise InvalidRequest(
            f"step: {step} s gives {span // step} points; at most {MAX_POINTS} (use a larger "
            "step or a later since)", field="step",
        )
    return step
