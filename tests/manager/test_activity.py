"""Session activity is written at most every 30 s, however much traffic there is."""

from __future__ import annotations

from datetime import timedelta

from fastapi import FastAPI
from sqlalchemy import select

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.services.sessions import activity
from tests.manager.conftest import Client, create


async def test_activity_is_recorded_and_throttled(app: FastAPI, admin: Client) -> None:
    [s] = await create(admin, resources={"gpu": 0})
    now = utcnow()
    async with app.state.sessionmaker() as db:
        assert await db.scalar(select(SessionRow.last_activity_at)) is None  # unknown at first
        assert await activity.record(db, s["id"], now)
        assert not await activity.record(db, s["id"], now + timedelta(seconds=10))
        assert await activity.record(db, s["id"], now + activity.EVERY)
        assert not await activity.record(db, "no-such-session", now)
        kept = await db.scalar(select(SessionRow.last_activity_at))
    assert kept == now + activity.EVERY
