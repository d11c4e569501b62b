"""The audit log (issue 43): a row per change, refusal and login, written with the change,
with the caller's request id; what a user reads of it is their own."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gpuslice.manager.app import create_app
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows
from tests.manager.conftest import Client, UserFactory, client_for, login

PRESET = {"name": "audited", "cpu": 1, "mem": "1g"}


async def test_a_change_leaves_one_row_with_the_callers_request_id(
    app: FastAPI, admin: Client
) -> None:
    r = await admin.post("/api/v1/presets", json=PRESET, headers={"X-Request-Id": "req-0001abc"})
    assert r.status_code == 201, r.text
    assert r.headers["x-request-id"] == "req-0001abc"
    [row] = await rows(app, request_id="req-0001abc")
    assert (row.action, row.outcome, row.actor_type, row.actor_name) == (
        "preset.create", "success", "user", "admin")
    assert row.via == "login_token" and row.token_id is not None
    assert row.details is not None and '"fields":["cpu","mem","name"]' in row.details
    assert "1g" not in row.details  # field names, never values


@pytest.mark.parametrize("given", ["short", "x" * 65, "has space-in-it", "semi;colon-1234"])
async def test_a_request_id_that_is_not_safe_is_replaced(admin: Client, given: str) -> None:
    r = await admin.get("/api/v1/auth/me", headers={"X-Request-Id": given})
    assert r.status_code == 200
    assert r.headers["x-request-id"] != given
    assert len(r.headers["x-request-id"]) == 32


async def test_every_answer_has_a_request_id(anon: Client) -> None:
    for r in (await anon.get("/api/v1/health"), await anon.get("/api/v1/auth/me"),
              await anon.get("/no/such/page")):
        assert len(r.headers["x-request-id"]) == 32


async def test_reads_of_ones_own_data_leave_no_row(app: FastAPI, admin: Client) -> None:
    r = await admin.get("/api/v1/presets", headers={"X-Request-Id": "read-0000001"})
    assert r.status_code == 200
    assert await rows(app, request_id="read-0000001") == []


async def test_logins_are_audited_with_their_outcome(app: FastAPI, anon: Client,
                                                      make_user: UserFactory) -> None:
    await make_user("alice")
    await login(anon, "alice", "password-alice")
    for name, tag in (("alice", "bad-pw-0001"), ("Pass word!", "bad-name-01")):
        r = await anon.post("/api/v1/auth/login", json={"username": name, "password": "nope"},
                            headers={"X-Request-Id": tag})
        assert r.status_code == 401, r.text
    ok = [r for r in await rows(app, action="auth.login", actor_name="alice")
          if r.outcome == "success"]
    assert ok and ok[-1].actor_type == "user" and '"method":"password"' in (ok[-1].details or "")
    [wrong] = await rows(app, request_id="bad-pw-0001")
    assert (wrong.action, wrong.outcome, wrong.reason, wrong.actor_name) == (
        "auth.login", "failure", "bad_credentials", "alice")
    [typed] = await rows(app, request_id="bad-name-01")
    assert typed.actor_name == "(invalid, 10 chars)"  # maybe a password typed as the name


async def test_the_console_login_form_is_audited_as_a_login(app: FastAPI, anon: Client,
                                                            make_user: UserFactory) -> None:
    await make_user("alice")
    origin = {"Origin": "http://manager"}
    for password, tag in (("nope", "form-bad-01"), ("password-alice", "form-good-1")):
        await anon.post("/login", data={"username": "alice", "password": password, "next": "/"},
                        headers=origin | {"X-Request-Id": tag})
    [wrong] = await rows(app, request_id="form-bad-01")
    assert (wrong.action, wrong.outcome, wrong.reason, wrong.actor_name) == (
        "auth.login", "failure", "bad_credentials", "alice")
    [right] = await rows(app, request_id="form-good-1")
    assert (right.action, right.outcome, right.actor_name) == ("auth.login", "success", "alice")


async def test_refusals_are_audited_but_unknown_callers_are_not(
    app: FastAPI, make_user: UserFactory
) -> None:
    bob = await make_user("bob")
    r = await bob.post("/api/v1/presets", json=PRESET, headers={"X-Request-Id": "denied-00001"})
    assert r.status_code == 403
    [row] = await rows(app, request_id="denied-00001")
    assert (row.action, row.outcome, row.reason, row.actor_name) == (
        "preset.create", "denied", "forbidden", "bob")
    r = await bob.delete("/api/v1/sessions/no-such-session",
                         headers={"X-Request-Id": "hidden-00001"})
    assert r.status_code == 404
    [row] = await rows(app, request_id="hidden-00001")
    assert (row.outcome, row.target_type, row.target_id) == ("denied", "session",
                                                              "no-such-session")
    async with client_for(app) as nobody:
        r = await nobody.post("/api/v1/presets", json=PRESET,
                              headers={"X-Request-Id": "anon-0000001"})
        assert r.status_code == 401
    async with client_for(app, "gs_" + "u" * 40) as unknown:
        r = await unknown.post("/api/v1/presets", json=PRESET,
                               headers={"X-Request-Id": "unknown-0001"})
        assert r.status_code == 401
    assert await rows(app, request_id="anon-0000001") == []
    assert await rows(app, request_id="unknown-0001") == []


async def test_a_revoked_token_presented_is_audited(app: FastAPI, anon: Client,
                                                    make_user: UserFactory) -> None:
    await make_user("carol")
    token = await login(anon, "carol", "password-carol")
    async with client_for(app, token) as carol:
        assert (await carol.post("/api/v1/auth/logout")).status_code == 204
        r = await carol.get("/api/v1/auth/me", headers={"X-Request-Id": "revoked-0001"})
        assert r.status_code == 401
    [row] = await rows(app, request_id="revoked-0001")
    assert (row.action, row.outcome, row.reason, row.actor_name, row.via) == (
        "auth.token_rejected", "denied", "token_revoked", "carol", "login_token")


async def test_a_failed_change_leaves_a_failure_row_and_no_success(
    app: FastAPI, admin: Client
) -> None:
    assert (await admin.post("/api/v1/presets", json=PRESET)).status_code == 201
    r = await admin.post("/api/v1/presets", json=PRESET, headers={"X-Request-Id": "again-000001"})
    assert r.status_code == 409, r.text
    [row] = await rows(app, request_id="again-000001")
    assert (row.outcome, row.reason) == ("failure", r.json()["code"])
    r = await admin.post("/api/v1/presets", json={"cpu": "x"},
                         headers={"X-Request-Id": "invalid-0001"})
    assert r.status_code == 422
    assert await rows(app, request_id="invalid-0001") == []  # 422: not audited


async def test_no_secret_reaches_the_log(app: FastAPI, admin: Client, anon: Client) -> None:
    r = await admin.post("/api/v1/auth/tokens", json={"name": "ci"})
    assert r.status_code == 201, r.text
    secret = r.json()["token"]
    await anon.post("/api/v1/auth/login", json={"username": "admin", "password": "hunter2-pw"})
    text = " ".join(repr(vars(row)) for row in await rows(app))
    assert secret not in text and "hunter2-pw" not in text


async def test_a_throttled_login_is_audited_as_denied(settings: ManagerSettings) -> None:
    throttled = settings.model_copy(update={"auth": settings.auth.model_copy(update={
        "login_window": 3600.0, "login_failures_per_user": 2})})
    app = create_app(throttled)
    async with app.router.lifespan_context(app), client_for(app) as anon:
        codes = []
        for n in range(4):
            r = await anon.post("/api/v1/auth/login", json={"username": "admin", "password": "x"},
                                headers={"X-Request-Id": f"throttle-{n:04d}"})
            codes.append(r.status_code)
        assert codes[-1] == 429, codes
        [row] = await rows(app, request_id="throttle-0003")
        assert (row.action, row.outcome, row.reason, row.actor_name) == (
            "auth.login", "denied", "throttled", "admin")


async def test_a_role_change_keeps_before_and_after_and_shows_in_the_users_own_log(
    app: FastAPI, admin: Client, make_user: UserFactory
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    me = (await alice.get("/api/v1/auth/me")).json()
    r = await admin.patch(f"/api/v1/users/{me['id']}", json={"role": "admin"},
                          headers={"X-Request-Id": "promote-0001"})
    assert r.status_code == 200, r.text
    [row] = await rows(app, request_id="promote-0001")
    assert (row.action, row.target_type, row.target_id) == ("user.update", "user", me["id"])
    assert '"changed":{"role":["user","admin"]}' in (row.details or ""), row.details
    mine = (await alice.get("/api/v1/auth/activity")).json()["items"]
    assert [(e["action"], e["actor_name"]) for e in mine][:1] == [("user.update", "admin")]
    assert {e["action"] for e in mine} >= {"auth.login", "user.update"}
    theirs = (await bob.get("/api/v1/auth/activity")).json()["items"]
    assert "promote-0001" not in str(theirs) and all(
        e["actor_name"] == "bob" for e in theirs), theirs
