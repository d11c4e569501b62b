"""Putting events in the outbox, in the caller's transaction: a status change commits with its
deliveries or not at all, and the outbox's unique ``(channel_id, event_key)`` makes a second
enqueue of the same event (another replica's pass, a retried transaction) a no-op."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import SessionResult, SessionStatus
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import (
    NotificationChannelRow,
    NotificationOutboxRow,
    ProjectRow,
    SessionRow,
    StatusHistoryRow,
    UserRow,
)
from gpuslice.manager.events import wake_after_commit

S = SessionStatus


def event_of(from_status: SessionStatus, to: SessionStatus, result: str | None,
             exit_code: int | None) -> str | None:
    """The event a status change is, if any (``result``, ``exit_code``: the session's, after
    the change)."""
    if to is S.RUNNING and from_status is not S.RUNNING:
        return "session.started"
    if to is S.TERMINATED:
        failed = result == SessionResult.FAILED or exit_code not in (None, 0)
        return "session.failed" if failed else "session.finished"
    if to is S.ERROR:
        return "session.failed"
    if to is S.CANCELLED:
        return "session.cancelled"
    if to is S.PENDING and from_status is S.TERMINATING:
        return "session.preempted"
    return None


# What an event says of its session, read in the transaction after the change (callers'
# rows may have only some columns loaded).
_COLUMNS = (SessionRow.id, SessionRow.name, SessionRow.owner_id, SessionRow.project_id,
            SessionRow.created_at, SessionRow.running_since, SessionRow.exit_code,
            SessionRow.result, SessionRow.node_id, SessionRow.status_reason,
            SessionRow.queue_position, SessionRow.ends_at)


async def status_changed(db: AsyncSession, session_id: str, from_status: SessionStatus,
                         to: SessionStatus, reason: str, at: datetime) -> None:
    """Enqueue the event a session's move is, if any, for the channels of its owner and
    project (in the transaction of the move: after its UPDATE)."""
    if to not in _EVENTFUL and not (to is S.PENDING and from_status is S.TERMINATING):
        return  # most moves (SCHEDULED, PREPARING, TERMINATING) are no event: no query
    row = (await db.execute(select(*_COLUMNS).where(SessionRow.id == session_id))).one()
    kind = event_of(from_status, to, row.result, row.exit_code)
    if kind is None:
        return
    channels = await _channels(db, row, kind)
    if not channels:
        return
    data: dict[str, Any] = {}
    key = f"{kind}:{row.id}"
    if kind == "session.started":
        since = await db.scalar(select(func.max(StatusHistoryRow.at)).where(
            StatusHistoryRow.session_id == row.id, StatusHistoryRow.to_status == S.PENDING))
        data["waited_s"] = max(0, int((at - aware(since or row.created_at)).total_seconds()))
        data["node_id"] = row.node_id
        key += f":{at.isoformat()}"  # each start once (a preempted session starts again)
    elif kind in ("session.finished", "session.failed"):
        if row.running_since is not None:
            data["runtime_s"] = max(0, int((at - aware(row.running_since)).total_seconds()))
        data["exit_code"] = row.exit_code
        data["reason"] = reason
    else:
        data["reason"] = reason
        if kind == "session.preempted":
            key += f":{at.isoformat()}"
    event = await session_event(db, row, kind, at, status=to, reason=reason, data=data)
    await insert(db, channels, key, event)


_EVENTFUL = frozenset({S.RUNNING, S.TERMINATED, S.ERROR, S.CANCELLED})


async def time_limit_warning(db: AsyncSession, session_id: str, at: datetime,
                             signal: str, left_s: int) -> None:
    """The warning the time-limit sweep just claimed (``warned_at``), once per session."""
    row = (await db.execute(select(*_COLUMNS).where(SessionRow.id == session_id))).one()
    channels = await _channels(db, row, "session.time_limit_warning")
    if channels:
        event = await session_event(
            db, row, "session.time_limit_warning", at, status=S.RUNNING,
            reason=row.status_reason,
            data={"ends_at": row.ends_at.isoformat() if row.ends_at else None,
                  "left_s": left_s, "signal": signal})
        await insert(db, channels, f"session.time_limit_warning:{row.id}", event)


async def idle_warning(db: AsyncSession, session_id: str, now: datetime, due_at: datetime,
                       kind: str, reason: str) -> None:
    """The session will be reclaimed at ``due_at`` (idle, or its lifetime over) unless it
    changes: once per countdown (activity that resets it gives a new ``due_at``, and a new
    warning when that one nears)."""
    row = (await db.execute(select(*_COLUMNS).where(SessionRow.id == session_id))).one()
    channels = await _channels(db, row, "session.idle_warning")
    if channels:
        event = await session_event(
            db, row, "session.idle_warning", now, status=S.RUNNING, reason=row.status_reason,
            data={"due_at": iso(due_at), "kind": kind, "reason": reason,
                  "left_s": max(0, int((due_at - now).total_seconds()))})
        await insert(db, channels, f"session.idle_warning:{row.id}:{iso(due_at)}", event)


async def pending_long(db: AsyncSession, now: datetime) -> int:
    """``session.pending_long`` for each session PENDING longer than its channel's
    ``pending_after``, once per (session, channel); how many were new."""
    channels = [c for c in (await db.scalars(select(NotificationChannelRow).where(
        NotificationChannelRow.enabled.is_(True)))).all()
        if "session.pending_long" in c.events]
    added = 0
    for channel in channels:
        owner = (SessionRow.owner_id == channel.owner_id if channel.owner_id
                 else SessionRow.project_id == channel.project_id)
        cutoff = now.timestamp() - channel.pending_after
        rows = (await db.execute(select(*_COLUMNS).where(
            owner, SessionRow.status == S.PENDING,
            SessionRow.created_at <= datetime.fromtimestamp(cutoff, now.tzinfo)).limit(100)
        )).all()
        for row in rows:
            event = await session_event(
                db, row, "session.pending_long", now, status=S.PENDING,
                reason=row.status_reason,
                data={"reason": row.status_reason, "position": row.queue_position,
                      "waiting_s": int((now - aware(row.created_at)).total_seconds())})
            added += await insert(db, [channel], f"session.pending_long:{row.id}", event)
    return added


async def session_event(db: AsyncSession, row: Any, kind: str, at: datetime, *,
                        status: SessionStatus, reason: str,
                        data: dict[str, Any]) -> dict[str, Any]:
    """The payload (docs/user-guide.md, "Notifications"); the console link is added when
    it is sent."""
    owner = await db.scalar(select(UserRow.username).where(UserRow.id == row.owner_id))
    project = None if row.project_id is None else await db.scalar(
        select(ProjectRow.name).where(ProjectRow.id == row.project_id))
    return {"type": kind, "time": iso(at),
            "session": {"id": row.id, "name": row.name, "owner": owner, "project": project,
                        "status": status.value, "reason": reason},
            "data": data}


async def insert(db: AsyncSession, channels: list[NotificationChannelRow], key: str,
                 event: dict[str, Any]) -> int:
    """One outbox row per channel, unless that (channel, key) is there already; how many
    were new."""
    now = utcnow()
    values: list[dict[str, Any]] = []
    for channel in channels:
        delivery_id = new_id()  # also the payload's id and the webhook-id header
        values.append({"id": delivery_id, "channel_id": channel.id, "event_key": key[:160],
                       "event": {**event, "id": delivery_id}, "status": "pending",
                       "attempts": 0, "next_attempt_at": now, "last_status": "",
                       "last_error": "", "created_at": now})
    dialect = postgresql if db.bind.dialect.name == "postgresql" else sqlite
    result = await db.execute(dialect.insert(NotificationOutboxRow).values(values)
                              .on_conflict_do_nothing().returning(NotificationOutboxRow.id))
    added = len(result.all())
    if added:
        wake_after_commit(db, "notify")
    return added


async def _channels(db: AsyncSession, row: Any, kind: str
                    ) -> list[NotificationChannelRow]:
    mine = [NotificationChannelRow.owner_id == row.owner_id]
    if row.project_id is not None:
        mine.append(NotificationChannelRow.project_id == row.project_id)
    found = (await db.scalars(select(NotificationChannelRow).where(
        or_(*mine), NotificationChannelRow.enabled.is_(True)))).all()
    return [c for c in found if kind in c.events]


def aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: datetime) -> str:
    return aware(value).isoformat().replace("+00:00", "Z")
