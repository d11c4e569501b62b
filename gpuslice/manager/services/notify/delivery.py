"""The delivery pass: claim due outbox rows, send them outside any transaction, record each
outcome only while the claim is still ours.

Claiming is one guarded UPDATE of ``locked_until`` (``WHERE locked_until IS NULL OR
locked_until < now``): of two replicas that pick the same row, the second's UPDATE finds it
locked (PostgreSQL re-reads the row once the first commits) and skips it. A claim lasts
``LEASE``; a replica that dies holding one lets it lapse, and the row is sent again (at least
once: receivers dedupe on ``webhook-id``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NotificationChannelRow, NotificationOutboxRow
from gpuslice.manager.services.notify import enqueue
from gpuslice.manager.services.notify.send import Outcome, send
from gpuslice.manager.settings import NotifySettings

log = logging.getLogger(__name__)
BATCH = 20
LEASE = timedelta(minutes=2)  # longer than a send can take (timeouts are at most 120 s)
JITTER = 0.2
FAILING, FAILING_SPAN = 20, timedelta(days=1)  # so many dead in a row, over so long: off
# session.started of a session that hardly waited: dropped, not sent.
SKIPPED = Outcome(False, "", "started without waiting")


async def deliver(sessionmaker: async_sessionmaker[AsyncSession], settings: NotifySettings,
                  console_url: str | None = None) -> int:
    """One pass: long-pending sessions enqueued, then up to ``BATCH`` due deliveries sent;
    how many were sent."""
    now = utcnow()
    async with sessionmaker() as db:
        if await enqueue.pending_long(db, now):
            await db.commit()
        claimed = await _claim(db, now)
        await db.commit()
    if not claimed:
        return 0
    outcomes = await asyncio.gather(*(
        _send(row, channel, settings, console_url) for row, channel, _ in claimed))
    sent = 0
    async with sessionmaker() as db:
        for (row, channel, lease), outcome in zip(claimed, outcomes, strict=True):
            sent += outcome.ok
            await _record(db, row, channel, lease, outcome, settings)
        await db.commit()
    return sent


async def _claim(db: AsyncSession, now: datetime
                 ) -> list[tuple[NotificationOutboxRow, NotificationChannelRow, datetime]]:
    due = select(NotificationOutboxRow.id).where(
        NotificationOutboxRow.status == "pending", NotificationOutboxRow.next_attempt_at <= now,
        or_(NotificationOutboxRow.locked_until.is_(None),
            NotificationOutboxRow.locked_until < now),
    ).order_by(NotificationOutboxRow.next_attempt_at).limit(BATCH)
    if db.bind.dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)
    ids = list((await db.scalars(due)).all())
    if not ids:
        return []
    # The lease's end is also the claim's token: a later claim (after it lapsed) has another.
    lease = now + LEASE + timedelta(microseconds=random.randrange(1_000_000))
    won = (await db.scalars(
        update(NotificationOutboxRow)
        .where(NotificationOutboxRow.id.in_(ids),
               or_(NotificationOutboxRow.locked_until.is_(None),
                   NotificationOutboxRow.locked_until < now))
        .values(locked_until=lease, attempts=NotificationOutboxRow.attempts + 1)
        .returning(NotificationOutboxRow.id)
        .execution_options(synchronize_session=False))).all()
    if not won:
        return []
    rows = (await db.execute(
        select(NotificationOutboxRow, NotificationChannelRow)
        .join(NotificationChannelRow,
              NotificationChannelRow.id == NotificationOutboxRow.channel_id)
        .where(NotificationOutboxRow.id.in_(won))
        .execution_options(populate_existing=True))).all()
    return [(row, channel, lease) for row, channel in rows]


async def _record(db: AsyncSession, row: NotificationOutboxRow,
                  channel: NotificationChannelRow, lease: datetime, outcome: Outcome,
                  settings: NotifySettings) -> None:
    now = utcnow()
    values: dict[str, Any] = {"locked_until": None, "last_status": outcome.status[:200],
                              "last_error": outcome.error[:1024]}
    schedule = settings.retry_schedule
    if outcome is SKIPPED:
        await db.execute(delete(NotificationOutboxRow).where(
            NotificationOutboxRow.id == row.id, NotificationOutboxRow.locked_until == lease))
        return
    if outcome.ok:
        values.update(status="sent", sent_at=now, next_attempt_at=None)
    elif outcome.retry and row.attempts <= len(schedule) and channel.enabled:
        delay = schedule[row.attempts - 1] * random.uniform(1 - JITTER, 1 + JITTER)
        if outcome.retry_after is not None:  # the receiver knows best (capped at 1 h)
            delay = outcome.retry_after
        values["next_attempt_at"] = now + timedelta(seconds=delay)
    else:
        values.update(status="dead", next_attempt_at=None)
    done = await db.execute(
        update(NotificationOutboxRow)
        .where(NotificationOutboxRow.id == row.id, NotificationOutboxRow.locked_until == lease)
        .values(**values).execution_options(synchronize_session=False))
    if done.rowcount != 1:  # type: ignore[attr-defined]
        return  # our claim lapsed and another pass took it: its outcome counts
    if outcome.ok:
        return
    log.info("notification %s (%s) to channel %s: %s %s", row.id, row.event.get("type"),
             channel.id, outcome.status or "-", outcome.error,
             extra={"channel_id": channel.id})
    if outcome.gone:
        await disable(db, channel, "the receiver answered 410 Gone: it no longer takes "
                      "these (enable the channel again once it does)")
    elif values.get("status") == "dead" and await _failing(db, channel.id, now):
        await disable(db, channel, f"its last {FAILING} deliveries failed, over more than "
                      f"a day (the last: {outcome.status or outcome.error})")


async def _failing(db: AsyncSession, channel_id: str, now: datetime) -> bool:
    """Whether the channel's last ``FAILING`` deliveries were all given up, over a day or
    more: a receiver that will not heal."""
    last = (await db.execute(
        select(NotificationOutboxRow.status, NotificationOutboxRow.created_at)
        .where(NotificationOutboxRow.channel_id == channel_id,
               NotificationOutboxRow.status != "pending")
        .order_by(NotificationOutboxRow.created_at.desc()).limit(FAILING))).all()
    return (len(last) == FAILING and all(status == "dead" for status, _ in last)
            and now - enqueue.aware(last[-1][1]) >= FAILING_SPAN)


async def disable(db: AsyncSession, channel: NotificationChannelRow, reason: str) -> None:
    """Turn ``channel`` off and tell its owner through their other channels (a user's
    channel: its user's; a project's: the other channels of the project)."""
    claimed = await db.execute(
        update(NotificationChannelRow)
        .where(NotificationChannelRow.id == channel.id, NotificationChannelRow.enabled.is_(True))
        .values(enabled=False, disabled_reason=reason)
        .execution_options(synchronize_session=False))
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        return
    log.warning("notification channel %s disabled: %s", channel.id, reason,
                extra={"channel_id": channel.id})
    same = (NotificationChannelRow.owner_id == channel.owner_id if channel.owner_id
            else NotificationChannelRow.project_id == channel.project_id)
    others = list((await db.scalars(select(NotificationChannelRow).where(
        same, NotificationChannelRow.enabled.is_(True),
        NotificationChannelRow.id != channel.id))).all())
    if others:
        name = channel.name or channel.kind
        event = {"type": "notify.channel_disabled", "time": enqueue.iso(utcnow()),
                 "session": None,
                 "data": {"channel_id": channel.id, "channel": name,
                          "message": f"notification channel {name} ({channel.id}) was "
                          f"disabled: {reason}"}}
        await enqueue.insert(db, others, f"notify.channel_disabled:{channel.id}:"
                             f"{enqueue.iso(utcnow())}", event)


async def _send(row: NotificationOutboxRow, channel: NotificationChannelRow,
                settings: NotifySettings, console_url: str | None) -> Outcome:
    if not channel.enabled:
        return Outcome(False, "", "the channel is disabled")
    event = row.event
    if event.get("type") == "session.started" and \
            event.get("data", {}).get("waited_s", 0) < settings.started_min_wait:
        return SKIPPED  # it hardly waited: no news
    return await send(channel.kind, channel.target, channel.secret, row.id,
                      _with_link(event, console_url), settings)


def _with_link(event: dict[str, Any], console_url: str | None) -> dict[str, Any]:
    session = event.get("session")
    if not console_url or not session:
        return event
    url = f"{console_url.rstrip('/')}/#/sessions/{session['id']}"
    return {**event, "session": {**session, "url": url}}
