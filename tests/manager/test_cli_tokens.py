"""CLI logins that expire (issue 42, identity.md §6.8): `POST /auth/cli-token` is a password
login whose token is of kind cli; it ends after `auth.cli_token_idle` unused (each use moves
that on) and `auth.cli_token_max` after it is made, with one line saying what to do; logout
ends it; tokens made before (kind api) keep working as they did."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows
from tests.manager.conftest import Client, UserFactory, client_for

EXPIRED = "this token has expired: log in again with gpuslice login URL"
IDLE, MAX = 3600, 7 * 86400


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    """CLI tokens that last an hour unused and a week in all; a username throttled after
    three failed logins."""
    auth = settings.auth.model_copy(update={"cli_token_idle": IDLE, "cli_token_max": MAX,
                                            "login_failures_per_user": 3})
    return settings.model_copy(update={"auth": auth})


async def _cli_login(anon: Client, username: str = "alice",
                     password: str = "password-alice") -> str:
    r = await anon.post("/api/v1/auth/cli-token",
                        json={"username": username, "password": password, "host": "laptop"})
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


async def _move(app: FastAPI, token_id: str, **back: float) -> None:
    """Move the token's times back by as many seconds (the clock moved on)."""
    async with app.state.sessionmaker() as db:
        row = await db.get(ApiTokenRow, token_id)
        assert row is not None
        values: dict[str, Any] = {}
        for column, seconds in back.items():
            value = getattr(row, column) or utcnow()
            values[column] = value - timedelta(seconds=seconds)
        await db.execute(update(ApiTokenRow).where(ApiTokenRow.id == token_id).values(**values))
        await db.commit()


async def test_a_cli_login_gives_a_cli_token_with_both_limits_and_no_login_token(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    async with app.state.sessionmaker() as db:
        before = await db.scalar(select(func.count()).select_from(ApiTokenRow))
    token = await _cli_login(anon)
    async with client_for(app, token) as cli:
        r = await cli.get("/api/v1/auth/token")
    assert r.status_code == 200, r.text
    info = r.json()
    assert (info["kind"], info["name"], info["idle_seconds"]) == ("cli", "cli@laptop", IDLE)
    async with app.state.sessionmaker() as db:
        row = await db.get(ApiTokenRow, info["id"])
        assert row is not None and row.expires_at is not None
        assert row.expires_at - row.created_at == timedelta(seconds=MAX)
        # the one new token: no 12-hour login token left alive beside it
        assert await db.scalar(select(func.count()).select_from(ApiTokenRow)) == before + 1
    row = (await rows(app, action="auth.login", actor_name="alice"))[-1]  # after make_user's
    assert (row.outcome, json.loads(row.details).get("kind")) == ("success", "cli")


async def test_a_cli_token_ends_after_its_idle_limit_and_each_use_moves_it_on(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    token = await _cli_login(anon)
    async with client_for(app, token) as cli:
        token_id = (await cli.get("/api/v1/auth/token")).json()["id"]
        await _move(app, token_id, created_at=IDLE - 120, last_used_at=IDLE - 120)
        assert (await cli.get("/api/v1/auth/me")).status_code == 200  # used: moved on
        info = (await cli.get("/api/v1/auth/token")).json()
        await _move(app, token_id, created_at=IDLE + 1, last_used_at=IDLE + 1)
        r = await cli.get("/api/v1/auth/me")
    assert r.status_code == 401
    assert (r.json()["code"], r.json()["message"]) == ("token_expired", EXPIRED)
    assert info["idle_expires_at"] > info["last_used_at"]
    [row] = await rows(app, action="auth.token_rejected")
    assert (row.actor_name, row.reason, row.via) == ("alice", "token_expired", "cli_token")


async def test_a_cli_token_ends_at_its_absolute_limit_however_often_it_is_used(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    token = await _cli_login(anon)
    async with client_for(app, token) as cli:
        token_id = (await cli.get("/api/v1/auth/token")).json()["id"]
        await _move(app, token_id, created_at=MAX - 60, expires_at=MAX - 60)
        assert (await cli.get("/api/v1/auth/me")).status_code == 200  # used a minute ago
        await _move(app, token_id, expires_at=61)
        r = await cli.get("/api/v1/auth/me")
    assert r.status_code == 401 and r.json()["message"] == EXPIRED


async def test_logout_ends_the_cli_token(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    token = await _cli_login(anon)
    async with client_for(app, token) as cli:
        assert (await cli.post("/api/v1/auth/logout")).status_code == 204
        r = await cli.get("/api/v1/auth/me")
    assert r.status_code == 401
    assert r.json()["message"] == "this token is unknown or was revoked"


async def test_an_api_token_made_before_keeps_working_without_an_idle_limit(
    app: FastAPI, make_user: UserFactory
) -> None:
    """What `gpuslice login` kept before (an API token `cli@host`) goes on as it was."""
    alice = await make_user("alice")
    r = await alice.post("/api/v1/auth/tokens", json={"name": "cli@old-laptop"})
    api = r.json()
    await _move(app, api["id"], created_at=400 * 86400, last_used_at=400 * 86400)
    async with client_for(app, api["token"]) as old:
        r = await old.get("/api/v1/auth/token")
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("kind", "expires_at", "idle_seconds", "idle_expires_at")
            } == {"kind": "api", "expires_at": None, "idle_seconds": None,
                  "idle_expires_at": None}


async def test_a_wrong_password_gets_no_cli_token_and_is_a_failed_login(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    r = await anon.post("/api/v1/auth/cli-token",
                        json={"username": "alice", "password": "wrong", "host": "laptop"})
    assert r.status_code == 401 and r.json()["code"] == "bad_credentials"
    [row] = await rows(app, action="auth.login", actor_name="alice", outcome="failure")
    assert row.reason == "bad_credentials"
    async with app.state.sessionmaker() as db:
        assert not (await db.scalars(select(ApiTokenRow).where(ApiTokenRow.kind == "cli"))).all()


async def test_a_password_change_ends_the_other_cli_logins(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    cli_token = await _cli_login(anon)
    r = await alice.post("/api/v1/auth/password", json={
        "current_password": "password-alice", "new_password": "another-pw",
        "keep_api_tokens": True})
    assert r.status_code == 204, r.text
    async with client_for(app, cli_token) as cli:
        assert (await cli.get("/api/v1/auth/me")).status_code == 401


async def test_a_cli_login_is_listed_and_ended_from_elsewhere(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    """`gpuslice token list` shows each machine's CLI login (expired once idle too long), and
    `gpuslice token revoke ID` ends one from another machine."""
    alice = await make_user("alice")
    token = await _cli_login(anon)
    [listed] = (await alice.get("/api/v1/auth/tokens")).json()
    assert (listed["kind"], listed["name"], listed["status"]) == ("cli", "cli@laptop", "active")
    await _move(app, listed["id"], created_at=IDLE + 1)
    [listed] = (await alice.get("/api/v1/auth/tokens")).json()
    assert listed["status"] == "expired"
    assert (await alice.delete(f"/api/v1/auth/tokens/{listed['id']}")).status_code == 204
    assert (await alice.get("/api/v1/auth/tokens")).json() == []
    async with client_for(app, token) as cli:
        assert (await cli.get("/api/v1/auth/me")).status_code == 401


async def test_cli_logins_are_throttled_with_the_other_logins(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("alice")
    wrong = {"username": "alice", "password": "wrong"}
    for _ in range(2):
        assert (await anon.post("/api/v1/auth/login", json=wrong)).status_code == 401
    assert (await anon.post("/api/v1/auth/cli-token", json=wrong)).status_code == 401
    r = await anon.post("/api/v1/auth/cli-token",
                        json={"username": "alice", "password": "password-alice"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    assert (await rows(app, action="auth.login", outcome="denied"))[-1].reason == "throttled"
