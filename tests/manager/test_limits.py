"""What one request and one user may cost (issue 16, finding 6): sessions per create, the size
of a session's definition, PENDING sessions per user, answer size, and retention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from gpuslice.manager.app import create_app
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, JoinTokenRow, SessionRow, StatusHistoryRow
from gpuslice.manager.services import retention
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.manager.conftest import IMAGE, AgentFactory, Client, UserFactory, create, login
from tests.manager.helpers import wait_status


async def test_one_create_is_bounded(admin: Client) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": IMAGE, "count": 11})
    assert r.status_code == 422 and r.json()["code"] == "too_many", r.text
    assert "sessions.max_count" in r.json()["message"]
    env = {f"K{i}": "v" * 30_000 for i in range(3)}  # 90 kB: above the 64 KiB definition
    r = await admin.post("/api/v1/sessions", json={"image": IMAGE, "env": env})
    assert r.status_code == 422 and r.json()["field"] == "env", r.text
    assert "at most 65536" in r.json()["message"]
    assert (await admin.get("/api/v1/sessions")).json()["total"] == 0


async def test_amplification_is_bounded(app: FastAPI, admin: Client) -> None:
    """The largest create there is: 10 sessions of a definition just under the limit."""
    env = {"A": "x" * 30_000, "B": "x" * 30_000}
    r = await admin.post("/api/v1/sessions", json={"image": IMAGE, "count": 10, "env": env})
    assert r.status_code == 201
    assert len(r.content) < 1024**2  # ~10 × 60 kB answered, not 10 × the body
    async with app.state.sessionmaker() as db:
        stored = await db.scalar(select(func.count()).select_from(SessionRow))
    assert stored == 10


async def test_pending_sessions_per_user_are_limited(
    admin: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice", policy={"max_pending": 3})  # no node: all stay PENDING
    await create(alice, count=2)
    r = await alice.post("/api/v1/sessions", json={"image": IMAGE, "count": 2})
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded", r.text
    assert "2 PENDING" in r.json()["message"] and "at most 3" in r.json()["message"]
    [one] = await create(alice)  # exactly up to the limit
    r = await alice.post("/api/v1/sessions", json={"image": IMAGE})
    assert r.status_code == 422
    await alice.delete(f"/api/v1/sessions/{one['id']}")  # CANCELLED: room for one more
    await create(alice)
    policies = (await admin.get("/api/v1/policies")).json()
    assert [p["max_pending"] for p in policies] == [3]


async def test_racing_creates_never_pass_the_pending_limit(make_user: UserFactory) -> None:
    alice = await make_user("alice", policy={"max_pending": 4})
    answers = await asyncio.gather(*(
        alice.post("/api/v1/sessions", json={"image": IMAGE, "count": 3}) for _ in range(3)
    ))
    assert sorted(r.status_code for r in answers) == [201, 422, 422]
    assert (await alice.get("/api/v1/sessions")).json()["total"] == 3


@pytest.fixture
def small_answers(settings: ManagerSettings) -> ManagerSettings:
    return settings.model_copy(update={"limits": settings.limits.model_copy(
        update={"max_answer": 64 * 1024})})


@pytest.fixture
async def small_app(small_answers: ManagerSettings) -> AsyncIterator[FastAPI]:
    application = create_app(small_answers)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_listing_page_stops_before_its_answer_gets_too_big(
    small_app: FastAPI, small_answers: ManagerSettings
) -> None:
    from tests.manager.conftest import client_for

    creds = dict(line.split(": ", 1) for line in
                 (small_answers.data_dir / "admin-credentials").read_text().splitlines())
    async with client_for(small_app) as anon:
        token = await login(anon, creds["username"], creds["password"])
    async with client_for(small_app, token) as admin:
        for _ in range(3):
            await create(admin, count=5, env={"BLOB": "y" * 5_000})
        page = (await admin.get("/api/v1/sessions", params={"limit": 100})).json()
        assert page["total"] == 15 and 0 < len(page["items"]) < 15
        rest = (await admin.get("/api/v1/sessions", params={
            "limit": 100, "offset": len(page["items"])})).json()
        ids = [s["id"] for s in page["items"] + rest["items"]]
        assert len(ids) == len(set(ids))  # paging on by the items returned loses nothing


async def test_retention_purges_bulky_data_of_old_sessions_and_keeps_history(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    await make_agent()
    old, recent = await create(admin, count=2, type="batch", command=["true"],
                               env={"TOKEN": "secret"})
    for s in (old, recent):
        await wait_status(admin, s["id"], {"RUNNING"})
        await admin.delete(f"/api/v1/sessions/{s['id']}")
        await wait_status(admin, s["id"], {"TERMINATED"})
    long_ago = utcnow() - timedelta(days=31)
    async with app.state.sessionmaker() as db:
        await db.execute(update(SessionRow).where(SessionRow.id == old["id"])
                         .values(updated_at=long_ago))
        db.add(ApiTokenRow(user_id=old["owner_id"], kind="login", name="login",
                        token_hash="0" * 64, expires_at=long_ago))
        db.add(JoinTokenRow(name="old", token_hash="1" * 64, expires_at=long_ago))
        await db.commit()
    purged = await retention.purge(app.state.sessionmaker, 30, 300)
    assert (purged.sessions, purged.tokens, purged.join_tokens) == (1, 1, 1)
    shown = (await admin.get(f"/api/v1/sessions/{old['id']}")).json()
    assert shown["env"] == {} and shown["purged_at"] is not None
    assert [h["status"] for h in shown["history"]][-1] == "TERMINATED"  # history stays
    logs = (await admin.get(f"/api/v1/sessions/{old['id']}/logs")).json()
    assert logs["logs"] == "" and logs["purged"] is True
    kept = (await admin.get(f"/api/v1/sessions/{recent['id']}")).json()
    assert kept["env"] == {"TOKEN": "secret"} and kept["purged_at"] is None
    assert "bye from" in (await admin.get(f"/api/v1/sessions/{recent['id']}/logs")).json()["logs"]
    async with app.state.sessionmaker() as db:
        history = await db.scalar(select(func.count()).select_from(StatusHistoryRow)
                                  .where(StatusHistoryRow.session_id == old["id"]))
    assert history and history >= 4
    again = await retention.purge(app.state.sessionmaker, 30, 300)
    assert again.sessions == 0


def test_limits_are_settings(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, sessions={"max_count": 3, "max_pending": 7},
                             limits={"max_body": 4096})
    assert (settings.sessions.max_count, settings.sessions.max_pending) == (3, 7)
    with pytest.raises(ValueError, match="max_count"):
        load_settings(data_dir=tmp_path, sessions={"max_count": 1000})
