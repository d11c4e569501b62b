"""Single sign-on through the real test OpenID provider (issue 42, identity.md §6.1-6.4):
sign-in, refusals, the login page, re-check and back-channel logout, over HTTP."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from gpuslice.manager.db.models import SsoLoginRow, SsoSessionRow, UserRow
from gpuslice.manager.services.sso import logins, sessions
from gpuslice.manager.services.sso import provider as provider_module
from gpuslice.manager.services.sso.provider import ProviderError
from tests.idp.oidc import OidcProvider
from tests.manager.audit_helpers import rows
from tests.manager.sso_helpers import (
    SsoManager,
    link_group,
    members_of,
    recheck_now,
    sso_manager,
    usernames,
)


@pytest.fixture
async def sso(_routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
              oidc_provider: OidcProvider) -> AsyncIterator[SsoManager]:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url,
                           oidc_provider) as manager:
        yield manager


async def test_alice_signs_in_and_lands_where_she_started(sso: SsoManager) -> None:
    await link_group(sso.app, "vision", "vision")
    async with sso.client() as http:
        answer = await sso.sign_in(http, "alice", next_path="/#/sessions")
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/#/sessions"
        assert "gpuslice_login" in http.cookies
        me = (await http.get("/api/v1/auth/me")).json()
        assert me["username"] == "alice"
    assert (await members_of(sso.app, "vision")) == {"alice": "idp"}
    logins = await rows(sso.app, action="auth.login", outcome="success")
    assert [json.loads(r.details)["method"] for r in logins] == ["oidc"]
    assert logins[0].actor_name == "alice"


async def test_a_user_in_no_allowed_group_is_told_why_and_gets_no_account(
        sso: SsoManager) -> None:
    async with sso.client() as http:
        answer = await sso.sign_in(http, "erin")
        assert answer.status_code == 403
        assert "you are not in a group allowed to use gpuslice (ask to join gpu-users)" in \
            answer.text
        assert "gpuslice_login" not in http.cookies
    assert "erin" not in await usernames(sso.app)
    refused = await rows(sso.app, action="auth.login", outcome="failure")
    assert [r.reason for r in refused] == ["not_allowed"]


async def test_a_local_account_of_the_same_name_is_not_taken_over(sso: SsoManager) -> None:
    async with sso.app.state.sessionmaker() as db:
        db.add(UserRow(username="alice", password_hash="x", role="user"))
        await db.commit()
    async with sso.client() as http:
        answer = await sso.sign_in(http, "alice")
        assert answer.status_code == 403
        assert ("an account named alice already exists and is not linked to your sign-in; an "
                "administrator can link it with `gpuslice admin user link alice --provider "
                "oidc --subject 0b8c3f1e-alice`") in html.unescape(answer.text)
        assert "gpuslice_login" not in http.cookies


async def test_a_replayed_or_tampered_callback_or_another_browser_is_refused(
        sso: SsoManager) -> None:
    async with sso.client() as http, sso.client() as stranger:
        start = await http.get("/auth/oidc/start")
        callback = await sso.at_provider(start.headers["location"], "bob")
        # the callback in a browser that did not start the sign-in (login CSRF)
        answer = await stranger.get(callback)
        assert answer.status_code == 400 and "another browser" in answer.text
        # its row is gone with that try: the real browser's callback is now a replay
        answer = await http.get(callback)
        assert answer.status_code == 400 and "already used or has expired" in answer.text
        start = await http.get("/auth/oidc/start")
        callback = await sso.at_provider(start.headers["location"], "bob")
        tampered = callback.replace("state=", "state=x")
        assert (await http.get(tampered)).status_code == 400
        assert "gpuslice_login" not in http.cookies
    reasons = [r.reason for r in await rows(sso.app, action="auth.login", outcome="failure")]
    assert reasons == ["state_invalid"] * 3


async def test_an_issuer_parameter_of_another_provider_is_refused(sso: SsoManager) -> None:
    async with sso.client() as http:
        start = await http.get("/auth/oidc/start")
        callback = await sso.at_provider(start.headers["location"], "bob")
        assert "iss=" in callback
        mixed = re.sub(r"iss=[^&]*", "iss=" + quote("https://evil.example", safe=""), callback)
        answer = await http.get(mixed)
        assert answer.status_code == 400
        assert "another identity provider" in answer.text
        assert "gpuslice_login" not in http.cookies


async def test_the_providers_error_is_one_line_on_the_login_page(sso: SsoManager) -> None:
    async with sso.client() as http:
        start = await http.get("/auth/oidc/start")
        state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
        answer = await http.get("/auth/oidc/callback", params={
            "error": "access_denied", "error_description": "no", "state": state})
        assert answer.status_code == 403
        assert "the identity provider refused the sign-in: access_denied" in answer.text
        assert "Log in with Test IdP" in answer.text


@pytest.mark.parametrize("target", ["//evil.example", "/\\evil.example", "https://evil.example",
                                    "%2F%2Fevil.example", "/\t/evil.example"])
async def test_next_never_leaves_the_manager(sso: SsoManager, target: str) -> None:
    async with sso.client() as http:
        answer = await sso.sign_in(http, "bob", next_path=target)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/"


async def test_the_login_page_links_to_the_provider(sso: SsoManager) -> None:
    async with sso.client() as http:
        page = (await http.get("/login", params={"next": "/#/sessions"})).text
        assert '<a class=sso href="/auth/oidc/start?next=%2F%23%2Fsessions">Log in with ' \
            'Test IdP</a>' in page
        assert "<form method=post action=/login>" in page  # the password form stays


async def test_groups_removed_at_the_provider_leave_the_project_at_the_recheck(
        sso: SsoManager) -> None:
    await link_group(sso.app, "vision", "vision")
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        assert (await members_of(sso.app, "vision")) == {"alice": "idp"}
        sso.provider.set_groups("alice", ["gpu-users"])
        await recheck_now(sso.app)
        assert (await members_of(sso.app, "vision")) == {}
        assert (await http.get("/api/v1/auth/me")).status_code == 200  # still signed in


async def test_disabled_at_the_provider_ends_her_cookie_at_the_recheck(
        sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        assert (await http.get("/api/v1/auth/me")).status_code == 200
        sso.provider.disable("alice")
        await recheck_now(sso.app)
        assert (await http.get("/api/v1/auth/me")).status_code == 401
    ended = await rows(sso.app, action="auth.session_refresh_failed")
    assert [r.reason for r in ended] == ["invalid_grant"]


async def test_a_refresh_answered_for_another_user_ends_the_session(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        async with sso.app.state.sessionmaker() as db:  # her refresh token now speaks for bob
            await db.execute(update(SsoSessionRow).values(subject="7d1e9a2c-bob"))
            await db.commit()
        await recheck_now(sso.app)
        assert (await http.get("/api/v1/auth/me")).status_code == 401
        async with sso.app.state.sessionmaker() as db:
            assert await db.scalar(select(SsoSessionRow.ended_reason)) == \
                "idp: the provider answered for another user"
    ended = await rows(sso.app, action="auth.session_refresh_failed")
    assert [r.reason for r in ended] == ["the provider answered for another user"]


async def test_an_unreachable_provider_ends_nothing(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        sso.provider.process.terminate()
        sso.provider.process.wait(timeout=10)
        await recheck_now(sso.app)
        assert (await http.get("/api/v1/auth/me")).status_code == 200


async def test_a_key_rotation_at_the_provider_between_two_sign_ins(
        sso: SsoManager, monkeypatch: pytest.MonkeyPatch) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
    sso.provider.rotate_keys()
    monkeypatch.setattr(provider_module, "_JWKS_REFETCH_EVERY", 0.0)  # as a minute later
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303


async def test_a_browser_at_another_host_name_goes_to_the_public_url_first(
        sso: SsoManager) -> None:
    other = sso.url.replace("127.0.0.1", "localhost")
    async with httpx.AsyncClient(base_url=other) as http:
        answer = await http.get("/auth/oidc/start", params={"next": "/#/sessions"})
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{sso.url}/auth/oidc/start?next=%2F%23%2Fsessions"
    assert "gpuslice_sso" not in answer.cookies  # the binder is set on the public host only


async def test_userinfo_is_read_when_asked_and_must_name_the_same_subject(
        _routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
        oidc_provider: OidcProvider) -> None:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url, oidc_provider,
                           use_userinfo=True) as manager, manager.client() as http:
        assert (await manager.sign_in(http, "bob")).status_code == 303
        assert (await http.get("/api/v1/auth/me")).json()["username"] == "bob"


async def test_a_back_channel_logout_ends_its_session_once(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        async with sso.app.state.sessionmaker() as db:
            # no sid (this client did not ask for one): every session of the subject ends
            assert await db.scalar(select(SsoSessionRow.subject)) == "0b8c3f1e-alice"
            claims = {"jti": "logout-1", "sub": "0b8c3f1e-alice", "iat": int(time.time())}
            assert await sessions.backchannel_logout(db, claims) == 1
            with pytest.raises(ProviderError, match="already used"):
                await sessions.backchannel_logout(db, claims)
        assert (await http.get("/api/v1/auth/me")).status_code == 401
        forged = await http.post("/auth/oidc/backchannel-logout",
                                 data={"logout_token": "not.a.token"})
        assert forged.status_code == 400
        assert forged.json()["error"] == "invalid_request"


async def test_a_logout_token_with_sid_and_sub_ends_her_sessions_stored_without_sid(
        sso: SsoManager) -> None:
    async with sso.client() as first, sso.client() as second:
        assert (await sso.sign_in(first, "alice")).status_code == 303
        async with sso.app.state.sessionmaker() as db:  # the first sign-in's came with a sid
            await db.execute(update(SsoSessionRow).values(idp_sid="sid-first"))
            await db.commit()
        assert (await sso.sign_in(second, "alice")).status_code == 303
        async with sso.app.state.sessionmaker() as db:  # Keycloak and Okta send both
            claims = {"jti": "logout-2", "sid": "sid-other", "sub": "0b8c3f1e-alice",
                      "iat": int(time.time())}
            assert await sessions.backchannel_logout(db, claims) == 1
        assert (await second.get("/api/v1/auth/me")).status_code == 401
        assert (await first.get("/api/v1/auth/me")).status_code == 200


async def test_a_logout_token_older_than_its_replay_window_is_refused(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        async with sso.app.state.sessionmaker() as db:
            claims = {"jti": "logout-3", "sub": "0b8c3f1e-alice",
                      "iat": int(time.time()) - 11 * 60}
            with pytest.raises(ProviderError, match="issued more than 10 minutes ago"):
                await sessions.backchannel_logout(db, claims, leeway=60)
        assert (await http.get("/api/v1/auth/me")).status_code == 200


async def test_auto_redirect_goes_to_the_provider_and_local_1_keeps_the_form(
        _routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
        oidc_provider: OidcProvider) -> None:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url, oidc_provider,
                           auto_redirect=True) as manager, manager.client() as http:
        answer = await http.get("/login", params={"next": "/#/sessions"})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/auth/oidc/start?next=%2F%23%2Fsessions"
        form = await http.get("/login", params={"local": "1"})
        assert form.status_code == 200
        assert "<form method=post action=/login>" in form.text
        assert "Log in with" not in form.text
        signed_out = await http.get("/login", params={"logged_out": "1"})
        assert "You are signed out of gpuslice." in signed_out.text


async def test_sign_ins_left_unfinished_give_way_to_new_ones_per_address(
        sso: SsoManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page with many <img src=/auth/oidc/start> cannot lock an address (a lab behind one
    NAT) out of single sign-on: the oldest unfinished sign-ins give way, the table stays
    bounded."""
    monkeypatch.setattr(logins, "PER_ADDRESS", 3)
    async with sso.client() as http:
        started = [await http.get("/auth/oidc/start") for _ in range(5)]
        assert [s.status_code for s in started] == [303] * 5
        async with sso.app.state.sessionmaker() as db:
            assert len((await db.scalars(select(SsoLoginRow))).all()) == 3
        # the newest finishes; the oldest gave way
        callback = await sso.at_provider(started[-1].headers["location"], "alice")
        assert (await http.get(callback)).status_code == 303
        assert (await http.get("/api/v1/auth/me")).json()["username"] == "alice"
        state = parse_qs(urlsplit(started[0].headers["location"]).query)["state"][0]
        old = await http.get("/auth/oidc/callback", params={"code": "x", "state": state})
        assert old.status_code == 400
        assert "already used or has expired" in html.unescape(old.text)
