"""`auth.password_login` (issue 42): who may sign in with a password. With "admins" only the
local admins may (everyone else signs in with single sign-on), with "local" only local
accounts; a refusal is one line, and only for the right password."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows
from tests.manager.conftest import Client


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    auth = settings.auth.model_copy(update={"password_login": "admins"})
    return settings.model_copy(update={"auth": auth})


async def test_only_admins_sign_in_with_a_password(app: FastAPI, admin: Client,
                                                   anon: Client) -> None:
    r = await admin.post("/api/v1/users", json={"username": "alice", "password": "alice-pass",
                                                "role": "user"})
    assert r.status_code == 201, r.text
    body = {"username": "alice", "password": "alice-pass"}
    for path, extra in (("/api/v1/auth/login", {}), ("/api/v1/auth/cli-token", {"host": "box"})):
        r = await anon.post(path, json=body | extra)
        assert (r.status_code, r.json()["code"]) == (403, "password_login_off"), r.text
        assert r.json()["message"] == ("signing in with a password is for administrators "
                                       "here: sign in with single sign-on (gpuslice login "
                                       "URL --sso)")
    r = await anon.post("/api/v1/auth/login", json=body | {"password": "wrong-pass"})
    assert r.status_code == 401, r.text  # a wrong password learns nothing more
    page = await anon.post("/login", data=body | {"next": "/"},
                           headers={"Origin": "http://manager"})
    assert page.status_code == 403 and "for administrators here" in page.text
    assert "gpuslice_login" not in page.cookies
    r = await admin.patch(f"/api/v1/users/{await _id(admin, 'alice')}", json={"role": "admin"})
    assert r.status_code == 200, r.text
    r = await anon.post("/api/v1/auth/login", json=body)
    assert r.status_code == 200, r.text  # an admin now
    # each refusal is a failed login in the audit log, the console's form too
    refused = [(row.action, row.outcome, row.actor_name) for row in await rows(app)
               if row.reason == "password_login_off"]
    assert refused == [("auth.login", "failure", "alice")] * 3, refused


async def _id(admin: Client, username: str) -> str:
    users = (await admin.get("/api/v1/users")).json()
    return str(next(u["id"] for u in users if u["username"] == username))
