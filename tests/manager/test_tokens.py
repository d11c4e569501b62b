"""Tokens and files (issue 16, finding 9): a password change or reset ends the user's logins
(API tokens too unless kept), expired tokens show as expired, the last admin stays an admin,
and the manager's files are private."""

from __future__ import annotations

import stat
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow
from gpuslice.manager.settings import ManagerSettings
from tests.conftest import pg_url
from tests.manager.conftest import Client, UserFactory, client_for, login


async def _user_id(admin: Client, name: str) -> str:
    return next(u["id"] for u in (await admin.get("/api/v1/users")).json()
                if u["username"] == name)


async def _api_token(client: Client) -> str:
    r = await client.post("/api/v1/auth/tokens", json={"name": "script"})
    assert r.status_code == 201
    return str(r.json()["token"])


@pytest.mark.parametrize("keep", [False, True])
async def test_a_reset_ends_the_users_logins(
    app: FastAPI, admin: Client, anon: Client, make_user: UserFactory, keep: bool
) -> None:
    alice = await make_user("alice")
    api = await _api_token(alice)
    r = await admin.patch(f"/api/v1/users/{await _user_id(admin, 'alice')}",
                          json={"password": "brand-new-pw", "keep_api_tokens": keep})
    assert r.status_code == 200, r.text
    assert (await alice.get("/api/v1/auth/me")).status_code == 401  # the login token ended
    async with client_for(app, api) as script:
        assert (await script.get("/api/v1/auth/me")).status_code == (200 if keep else 401)
    assert await login(anon, "alice", "brand-new-pw")


async def test_changing_ones_password_ends_the_other_logins(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    alice = await make_user("alice")
    other_login = await login(anon, "alice", "password-alice")
    api = await _api_token(alice)
    r = await alice.post("/api/v1/auth/password", json={
        "current_password": "wrong", "new_password": "another-pw"})
    assert r.status_code == 401 and r.json()["field"] == "current_password"
    r = await alice.post("/api/v1/auth/password", json={
        "current_password": "password-alice", "new_password": "another-pw",
        "keep_api_tokens": True})
    assert r.status_code == 204, r.text
    assert (await alice.get("/api/v1/auth/me")).status_code == 200  # this one goes on
    for token, alive in ((other_login, False), (api, True)):
        async with client_for(app, token) as c:
            assert (await c.get("/api/v1/auth/me")).status_code == (200 if alive else 401)
    assert await login(anon, "alice", "another-pw")


async def test_expired_tokens_show_as_expired(app: FastAPI, make_user: UserFactory) -> None:
    alice = await make_user("alice")
    r = await alice.post("/api/v1/auth/tokens", json={"name": "short", "expires_in_days": 1})
    token_id = r.json()["id"]
    await _api_token(alice)
    async with app.state.sessionmaker() as db:
        await db.execute(update(ApiTokenRow).where(ApiTokenRow.id == token_id)
                         .values(expires_at=utcnow() - timedelta(seconds=1)))
        await db.commit()
    listed = {t["name"]: t["status"] for t in (await alice.get("/api/v1/auth/tokens")).json()}
    assert listed == {"short": "expired", "script": "active"}


async def test_the_last_admin_cannot_be_demoted_or_disabled(
    admin: Client, make_user: UserFactory
) -> None:
    me = (await admin.get("/api/v1/auth/me")).json()["id"]
    for change, field in (({"role": "user"}, "role"), ({"is_active": False}, "is_active")):
        r = await admin.patch(f"/api/v1/users/{me}", json=change)
        assert r.status_code == 409 and r.json()["code"] == "last_admin", r.text
        assert r.json()["field"] == field
    assert (await admin.get("/api/v1/auth/me")).json()["role"] == "admin"
    await make_user("second", role="admin")
    r = await admin.patch(f"/api/v1/users/{me}", json={"role": "user"})
    assert r.status_code == 200 and r.json()["role"] == "user"


@pytest.mark.skipif(pg_url() is not None, reason="the SQLite file (PostgreSQL holds no file)")
async def test_the_managers_files_are_private(app: FastAPI, settings: ManagerSettings,
                                             admin: Client) -> None:
    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(settings.data_dir) == 0o700
    assert mode(settings.data_dir / "admin-credentials") == 0o600
    database = Path(settings.database_url.split("///", 1)[1])
    assert mode(database) == 0o600
    await admin.post("/api/v1/policies", json={"name": "p"})  # a write: the WAL exists now
    wal = database.with_name(database.name + "-wal")
    assert wal.exists() and mode(wal) == 0o600
