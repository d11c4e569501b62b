"""Two managers on one PostgreSQL (issue 43): each event is enqueued once and sent once,
although both change the same sessions, sweep the same long-pending ones and run their
delivery passes at the same time."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine, make_sessionmaker
from gpuslice.manager.db.models import (
    NotificationChannelRow,
    NotificationOutboxRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.errors import StaleStatus
from gpuslice.manager.events import Hub
from gpuslice.manager.services.lifecycle import transition
from gpuslice.manager.services.notify import delivery
from gpuslice.manager.settings import NotifySettings
from tests.conftest import pg_url
from tests.manager.notify_receivers import http_receiver
from tests.waits import Deadline

pytestmark = pytest.mark.pg
ENDING, WAITING = 40, 10


@pytest.mark.skipif(pg_url() is None, reason="needs PostgreSQL: set GPUSLICE_TEST_PG")
async def test_two_managers_enqueue_and_send_each_event_once(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "BATCH", 3)  # small claims, so the two passes interleave
    engines = [make_engine(database_url, pool_size=5) for _ in range(2)]
    try:
        await migrate.upgrade(engines[0])
        makers = [make_sessionmaker(engine, Hub()) for engine in engines]
        with http_receiver() as receiver:
            settings = NotifySettings(allowed_targets=["127.0.0.1/32"],
                                      retry_schedule=[0.2, 0.2], started_min_wait=0)
            ending = await _seed(makers[0], receiver.url)
            # Both managers end every session: one wins each, and only its move enqueues.
            barriers = {session_id: asyncio.Barrier(2) for session_id in ending}
            wins = await asyncio.gather(*(_end(maker, barriers) for maker in makers))
            assert sum(wins) == ENDING
            deadline = Deadline(30)
            while await _pending(makers[0]):
                assert not deadline.passed, "deliveries still pending"
                await asyncio.gather(*(delivery.deliver(m, settings) for m in makers))
            posts = receiver.posts
        ids = [p.headers["webhook-id"] for p in posts]
        kinds = sorted(json.loads(p.body)["type"] for p in posts)
        print(f"posts={len(posts)} distinct={len(set(ids))} wins={wins}")
        assert len(ids) == len(set(ids)) == ENDING + WAITING
        assert kinds == ["session.finished"] * ENDING + ["session.pending_long"] * WAITING
        async with makers[0]() as db:
            rows = (await db.execute(select(NotificationOutboxRow.status, func.count())
                                     .group_by(NotificationOutboxRow.status))).all()
        assert dict(rows) == {"sent": ENDING + WAITING}
    finally:
        for engine in engines:
            await engine.dispose()


async def _seed(maker: async_sessionmaker[AsyncSession], url: str) -> list[str]:
    now = datetime.now(UTC)
    async with maker() as db:
        user = UserRow(username="alice", password_hash="-", role="user", is_active=True)
        db.add(user)
        await db.flush()
        db.add(NotificationChannelRow(
            owner_id=user.id, kind="webhook", name="ci", target=url, secret="whsec_" + "A" * 32,
            events=["session.finished", "session.pending_long"], pending_after=60,
            enabled=True, disabled_reason=""))
        rows = [{"name": f"s{i}", "owner_id": user.id, "image": "python:3.11", "type": "batch",
                 "env": {}, "priority": 0, "pool": "default", "gpu": 0, "cpu": 100,
                 "mem": 2**20, "status": "RUNNING" if i < ENDING else "PENDING",
                 "status_reason": "", "created_at": now - timedelta(hours=1),
                 "updated_at": now, "running_since": now - timedelta(minutes=5)}
                for i in range(ENDING + WAITING)]
        ids = (await db.scalars(insert(SessionRow).returning(SessionRow.id), rows)).all()
        await db.commit()
    return list(ids[:ENDING])


async def _end(maker: async_sessionmaker[AsyncSession],
               barriers: dict[str, asyncio.Barrier]) -> int:
    """End each session, having loaded it RUNNING just as the other manager did."""
    won = 0
    for session_id, barrier in barriers.items():
        async with maker() as db:
            row = await db.get(SessionRow, session_id)
            assert row is not None and row.status == SessionStatus.RUNNING
            await barrier.wait()
            try:
                await transition(db, row, SessionStatus.TERMINATED, "exited with code 0",
                                 exit_code=0, result="SUCCESS")
                await db.commit()
                won += 1
            except StaleStatus:
                await db.rollback()
    return won


async def _pending(maker: async_sessionmaker[AsyncSession]) -> int:
    async with maker() as db:
        waiting = await db.scalar(select(func.count()).select_from(SessionRow).where(
            SessionRow.status == SessionStatus.PENDING))
        outbox = await db.scalar(select(func.count()).select_from(NotificationOutboxRow)
                                 .where(NotificationOutboxRow.status != "sent"))
        enqueued = await db.scalar(select(func.count()).select_from(NotificationOutboxRow))
    # until every long-pending session was swept and every delivery sent
    return (outbox or 0) + max(0, ENDING + (waiting or 0) - (enqueued or 0))
