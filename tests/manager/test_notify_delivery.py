"""The delivery pass's promises (issue 43), one pass at a time (`loop_table.run_once`): a
manager that dies holding claims loses nothing, and a channel whose deliveries keep failing
for a day is turned off."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import insert

from gpuslice.manager import loop_table
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import NotificationChannelRow, NotificationOutboxRow
from gpuslice.manager.services.notify import delivery, enqueue
from gpuslice.manager.settings import ManagerSettings, NotifySettings
from tests.manager.conftest import Client, UserFactory
from tests.manager.notify_receivers import http_receiver
from tests.waits import Deadline

pytestmark = pytest.mark.loops_off("notifications")


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    notify = NotifySettings(allowed_targets=["127.0.0.1/32"], retry_schedule=[0.2])
    return settings.model_copy(update={"notify": notify})


async def _channel(app: FastAPI, client: Client, url: str) -> NotificationChannelRow:
    r = await client.post("/api/v1/notifications/channels",
                          json={"kind": "webhook", "target": url, "events": ["finished"]})
    assert r.status_code == 201, r.text
    async with app.state.sessionmaker() as db:
        row = await db.get(NotificationChannelRow, r.json()["id"])
        assert row is not None
        return row


def _event(n: int) -> dict[str, Any]:
    return {"type": "session.finished", "time": enqueue.iso(utcnow()), "session": None,
            "data": {"n": n}}


async def test_claims_of_a_manager_that_died_are_sent_once_they_lapse(
    app: FastAPI, make_user: UserFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery, "LEASE", timedelta(seconds=0.5))
    alice = await make_user("alice")
    with http_receiver() as receiver:
        channel = await _channel(app, alice, receiver.url)
        async with app.state.sessionmaker() as db:
            for n in range(5):
                await enqueue.insert(db, [channel], f"session.finished:{n}", _event(n))
            await db.commit()
            claimed = await delivery._claim(db, utcnow())  # and then it dies, sending nothing
            await db.commit()
        assert len(claimed) == 5
        await loop_table.run_once(app, "notifications")
        assert receiver.posts == []  # still claimed: no one else sends them
        deadline = Deadline(10)
        while len(receiver.posts) < 5:
            assert not deadline.passed, receiver.posts
            await asyncio.sleep(0.05)
            await loop_table.run_once(app, "notifications")
        await loop_table.run_once(app, "notifications")
    ids = {p.headers["webhook-id"] for p in receiver.posts}
    assert len(receiver.posts) == len(ids) == 5
    assert sorted(json.loads(p.body)["data"]["n"] for p in receiver.posts) == list(range(5))
    rows = (await alice.get("/api/v1/notifications/deliveries")).json()
    assert [r["status"] for r in rows] == ["sent"] * 5 and {r["attempts"] for r in rows} == {2}


async def test_a_channel_failing_for_a_day_is_disabled(
    app: FastAPI, make_user: UserFactory,
) -> None:
    alice = await make_user("alice")
    with http_receiver(script=[404]) as receiver:
        channel = await _channel(app, alice, receiver.url)
        then = utcnow() - timedelta(days=2)
        async with app.state.sessionmaker() as db:  # 19 given up over the last two days
            await db.execute(insert(NotificationOutboxRow), [{
                "id": new_id(), "channel_id": channel.id, "event_key": f"old:{n}",
                "event": _event(n), "status": "dead", "attempts": 1, "last_status": "HTTP 404",
                "last_error": "the receiver answered 404", "created_at": then + timedelta(
                    hours=n)} for n in range(19)])
            await enqueue.insert(db, [channel], "session.finished:new", _event(19))
            await db.commit()
        await loop_table.run_once(app, "notifications")
        assert len(receiver.posts) == 1
    [listed] = (await alice.get("/api/v1/notifications/channels")).json()
    assert not listed["enabled"]
    assert listed["disabled_reason"].startswith("its last 20 deliveries failed")
    assert "HTTP 404" in listed["disabled_reason"]
