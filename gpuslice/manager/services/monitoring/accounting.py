"""Accounting: what each user used per UTC day (fGPU-hours, CPU-hours, GPU-memory-hours).

Read from the daily rows (written as minutes are packed, exactly their sums), the closed minutes
not yet packed and the minutes still open: exactly the sum of the history, never behind it.
Users see their own; admins everyone's, or one user's.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from sqlalchemy import select, true
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.durations import parse_duration
from gpuslice.common.resources import ResourceError
from gpuslice.common.schemas.monitoring import UsageReport, UsageRow
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ProjectRow,
    SessionRow,
    UsageDailyRow,
    UsageMinuteRow,
    UsageSeriesRow,
    UserRow,
)
from gpuslice.manager.errors import Forbidden, InvalidRequest
from gpuslice.manager.services.monitoring.codec import Point
from gpuslice.manager.services.monitoring.history import SUMS, public_totals, steady
from gpuslice.manager.services.monitoring.samples import DAY_MINUTES, SERIES, open_point

MAX_DAYS = 3660
Key = tuple[str, int]  # (owner id, epoch day)
_EPOCH = date(1970, 1, 1)


async def usage_report(
    db: AsyncSession, viewer: UserRow, *, user: str | None, since: str | None, until: str | None,
    by: str = "user",
) -> UsageReport:
    """Per user (``by`` "project": per project) and UTC day from ``since`` (a date, or a
    number of days back: ``7d`` is today and the 6 days before; default ``7d``) to ``until``
    (a date; default today): the viewer's own, or (admins) everyone's or ``user``'s (a username
    or id)."""
    today = utcnow().date()
    first_day = _day(since or "7d", today, "since")
    last_day = _day(until, today, "until") if until else today
    return await _report(db, viewer, user, first_day, last_day, by == "project")


def _day(text: str, today: date, field: str) -> date:
    try:
        return today - timedelta(days=max(1, -(-parse_duration(text, field=field) // 86400)) - 1)
    except ResourceError:
        pass
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{field}: {text!r} is neither a number of days back (7d, 30d) "
                             "nor a date (2026-01-31)", field=field) from None


async def _report(
    db: AsyncSession, viewer: UserRow, user: str | None, since: date, until: date,
    by_project: bool = False,
) -> UsageReport:
    if until < since:
        raise InvalidRequest("until is before since", field="until")
    if (until - since).days >= MAX_DAYS:
        raise InvalidRequest(f"at most {MAX_DAYS} days at once", field="since")
    owner = await _owner(db, viewer, user)
    first, last = (since - _EPOCH).days, (until - _EPOCH).days
    mine = SERIES.c.owner_id == owner if owner is not None else true()
    projects = await _projects_of(db, owner) if by_project else None
    totals, sessions = await steady(db, mine, lambda: _sums(db, owner, first, last, projects))
    names = dict((await db.execute(
        select(UserRow.id, UserRow.username).where(UserRow.id.in_({o for o, _ in totals}))
    )).tuples().all())
    await db.commit()
    rows = [
        UsageRow(user="" if by_project else names.get(o, o),
                 project=o if by_project else None, day=_EPOCH + timedelta(days=d),
                 sessions=len(sessions[(o, d)]), totals=public_totals(sums))
        for (o, d), sums in totals.items()
    ]
    rows.sort(key=lambda r: (r.day, r.project or "", r.user))
    return UsageReport(since=since, until=until, rows=rows)


async def _projects_of(db: AsyncSession, owner: str | None) -> dict[int, str]:
    """Each usage series' project name (of ``owner``'s sessions only, when given)."""
    stmt = (
        select(UsageSeriesRow.id, ProjectRow.name)
        .join(SessionRow, SessionRow.id == UsageSeriesRow.session_id)
        .join(ProjectRow, ProjectRow.id == SessionRow.project_id)
    )
    if owner is not None:
        stmt = stmt.where(UsageSeriesRow.owner_id == owner)
    return dict((await db.execute(stmt)).tuples().all())


async def _sums(
    db: AsyncSession, owner: str | None, first: int, last: int,
    projects: dict[int, str] | None = None,
) -> tuple[dict[Key, dict[str, int]], dict[Key, set[int]]]:
    """Per (owner, epoch day), or with ``projects`` (series -> project) per (project, epoch
    day): the sums of its closed points and open minutes, and the series measured."""

    def who(owner_id: str, series_id: int) -> str:
        return owner_id if projects is None else projects.get(series_id, "-")

    totals: dict[Key, dict[str, int]] = defaultdict(lambda: dict.fromkeys(SUMS, 0))
    sessions: dict[Key, set[int]] = defaultdict(set)
    daily = select(UsageDailyRow).where(UsageDailyRow.day >= first, UsageDailyRow.day <= last)
    open_ = select(UsageSeriesRow).where(UsageSeriesRow.minute.is_not(None),
                                      UsageSeriesRow.minute >= first * DAY_MINUTES,
                                      UsageSeriesRow.minute < (last + 1) * DAY_MINUTES)
    if owner is not None:
        daily = daily.where(UsageDailyRow.owner_id == owner)
        open_ = open_.where(UsageSeriesRow.owner_id == owner)
    for row in (await db.scalars(daily.execution_options(populate_existing=True))).all():
        key = (who(row.owner_id, row.series_id), row.day)
        sessions[key].add(row.series_id)
        for name in SUMS:
            totals[key][name] += getattr(row, name)
    unpacked = (
        select(UsageSeriesRow.owner_id, UsageMinuteRow.series_id, UsageMinuteRow.minute,
               *(getattr(UsageMinuteRow, k) for k in SUMS))
        .join(UsageSeriesRow, UsageSeriesRow.id == UsageMinuteRow.series_id)
        .where(UsageMinuteRow.minute >= first * DAY_MINUTES,
               UsageMinuteRow.minute < (last + 1) * DAY_MINUTES)
    )
    if owner is not None:
        unpacked = unpacked.where(UsageSeriesRow.owner_id == owner)
    for minute_owner, series_id, minute, *values in await db.execute(unpacked):
        key = (who(minute_owner, series_id), minute // DAY_MINUTES)
        sessions[key].add(series_id)
        for name, value in zip(SUMS, values, strict=True):
            totals[key][name] += value
    for series in (await db.scalars(open_.execution_options(populate_existing=True))).all():
        minute, point = open_point(series) or (0, Point(0))
        key = (who(series.owner_id, series.id), minute // DAY_MINUTES)
        sessions[key].add(series.id)
        for name in SUMS:
            totals[key][name] += getattr(point, name)
    return totals, sessions


async def _owner(db: AsyncSession, viewer: UserRow, user: str | None) -> str | None:
    if viewer.role != Role.ADMIN:
        if user is not None and user not in (viewer.username, viewer.id):
            raise Forbidden("only admins see other users' usage", field="user")
        return viewer.id
    if user is None:
        return None
    found = await db.scalar(
        select(UserRow.id).where((UserRow.username == user) | (UserRow.id == user))
    )
    if found is None:
        raise InvalidRequest(f"no user {user!r}", field="user", code="unknown_user")
    return found
