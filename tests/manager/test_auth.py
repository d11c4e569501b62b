"""Login, tokens, the first admin, roles, and that every endpoint but two needs a token."""

from __future__ import annotations

import logging
import stat

import pytest
from fastapi import FastAPI

from gpuslice.manager.services.users import CREDENTIALS_FILE
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import PRODUCTION_HASHER, Client, UserFactory, client_for, login

PUBLIC = {("POST", "/api/v1/auth/login"), ("POST", "/api/v1/auth/cli-token"),
          ("GET", "/api/v1/health"),
          ("GET", "/api/v1/health/live"), ("GET", "/api/v1/health/ready"),
          ("GET", "/api/v1/health/loops"),
          ("POST", "/api/v1/agents/register"),
          # single sign-on (issue 42): how to sign in, and the CLI's device sign-in
          ("GET", "/api/v1/auth/providers"), ("POST", "/api/v1/auth/device"),
          ("POST", "/api/v1/auth/device/token"), ("POST", "/api/v1/auth/cli/token")}
# The local model store's presigned URLs: the signature in the URL is the credential
# (tests/manager/test_models.py: an altered or expired one is a 403).
SIGNED = {("GET", "/api/v1/model-store/{key}"), ("PUT", "/api/v1/model-store/{key}")}


def test_passwords_are_stored_with_argon2id_at_production_cost() -> None:
    # The manager's tests hash at argon2's cheapest (conftest.py); what users get is this.
    from argon2 import extract_parameters

    stored = PRODUCTION_HASHER.hash("correct horse battery staple")
    params = extract_parameters(stored)
    assert stored.startswith("$argon2id$")
    assert params.memory_cost >= 64 * 1024 and params.time_cost >= 3, params
    assert PRODUCTION_HASHER.verify(stored, "correct horse battery staple")


async def test_first_admin_credentials_are_private_and_not_logged(
    settings: ManagerSettings, caplog: pytest.LogCaptureFixture
) -> None:
    from gpuslice.manager.app import create_app

    caplog.set_level(logging.DEBUG)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        path = settings.data_dir / CREDENTIALS_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        password = path.read_text().split("password: ")[1].strip()
        assert password not in caplog.text
        assert str(path) in caplog.text
    async with app.router.lifespan_context(app):  # second start: no new admin, file unchanged
        assert password in path.read_text()


async def test_every_endpoint_needs_a_token_except_login_and_health(
    app: FastAPI, anon: Client
) -> None:
    paths = app.openapi()["paths"]
    checked = 0
    for path, methods in paths.items():
        for method in methods:
            if (method.upper(), path) in PUBLIC:
                continue
            url = path.replace("{", "x").replace("}", "")
            if (method.upper(), path) in SIGNED:
                r = await anon.request(method.upper(), url, params={
                    "expires": 4102444800, "signature": "0" * 64})
                assert r.status_code == 403, (method, path, r.status_code)
                continue
            r = await anon.request(method.upper(), url)
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.json()["code"] == "unauthorized"
            checked += 1
    assert checked >= 20


async def test_bad_password_and_bad_token(anon: Client, app: FastAPI) -> None:
    r = await anon.post("/api/v1/auth/login", json={"username": "admin", "password": "nope"})
    assert r.status_code == 401
    assert r.json() == {
        "code": "bad_credentials", "message": "wrong username or password", "field": None
    }
    async with client_for(app, "gsu_forged") as forged:
        assert (await forged.get("/api/v1/sessions")).status_code == 401


async def test_api_tokens_are_shown_once_and_revocable(app: FastAPI, admin: Client) -> None:
    r = await admin.post("/api/v1/auth/tokens", json={"name": "ci"})
    assert r.status_code == 201
    token, token_id = r.json()["token"], r.json()["id"]
    listed = (await admin.get("/api/v1/auth/tokens")).json()
    assert [t["name"] for t in listed] == ["ci"] and "token" not in listed[0]
    async with client_for(app, token) as ci:
        assert (await ci.get("/api/v1/auth/me")).status_code == 200
        assert (await admin.delete(f"/api/v1/auth/tokens/{token_id}")).status_code == 204
        assert (await ci.get("/api/v1/auth/me")).status_code == 401


async def test_logout_revokes_the_login_token(
    app: FastAPI, anon: Client, make_user: UserFactory
) -> None:
    await make_user("bob")
    token = await login(anon, "bob", "password-bob")
    async with client_for(app, token) as bob:
        assert (await bob.post("/api/v1/auth/logout")).status_code == 204
        assert (await bob.get("/api/v1/auth/me")).status_code == 401


async def test_users_cannot_manage_users_or_policies(make_user: UserFactory) -> None:
    user = await make_user()
    for method, url in (("GET", "/api/v1/users"), ("POST", "/api/v1/policies"),
                        ("GET", "/api/v1/nodes"), ("POST", "/api/v1/join-tokens")):
        r = await user.request(method, url, json={"name": "x"})
        assert r.status_code == 403, url
        assert r.json()["code"] == "forbidden"


async def test_disabled_user_is_locked_out(admin: Client, make_user: UserFactory) -> None:
    carol = await make_user("carol")
    me = (await carol.get("/api/v1/auth/me")).json()
    r = await admin.patch(f"/api/v1/users/{me['id']}", json={"is_active": False})
    assert r.status_code == 200 and r.json()["is_active"] is False
    assert (await carol.get("/api/v1/auth/me")).status_code == 401


async def test_duplicate_user_is_a_conflict(admin: Client) -> None:
    body = {"username": "dave", "password": "long-enough"}
    assert (await admin.post("/api/v1/users", json=body)).status_code == 201
    r = await admin.post("/api/v1/users", json=body)
    assert r.status_code == 409 and r.json()["field"] == "username"
