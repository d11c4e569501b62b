"""Device sign-in (issue 42, identity.md §6.7): a code the CLI asks for, approved or denied on
the /device page by a user signed in with single sign-on, polled for by the CLI."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from gpuslice.manager.app import bind
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ApiTokenRow,
    DeviceLoginRow,
    LoginFailureRow,
    UserRow,
)
from gpuslice.manager.server import ManagerServer
from gpuslice.manager.services.sso import sessions
from gpuslice.manager.settings import ManagerSettings
from tests.idp.oidc import OidcProvider
from tests.manager.audit_helpers import rows
from tests.manager.sso_helpers import (
    SsoManager,
    recheck_now,
    sso_manager,
)
from tests.ports import free_port


@pytest.fixture
async def sso(_routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
              oidc_provider: OidcProvider) -> AsyncIterator[SsoManager]:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url,
                           oidc_provider) as manager:
        yield manager


async def ask(http: httpx.AsyncClient) -> dict[str, str]:
    answer = await http.post("/api/v1/auth/device",
                             json={"client_host": "gpu-box", "os_user": "bob"})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_code_approved_on_the_device_page_gives_the_cli_a_token(
        sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await ask(cli)
        assert re.fullmatch(r"[B-Z]{4}-[B-Z]{4}", code["user_code"])
        assert code["verification_uri"] == f"{sso.url}/device"
        pending = await cli.post("/api/v1/auth/device/token",
                                 json={"device_code": code["device_code"]})
        assert pending.json()["code"] == "authorization_pending"
        again = await cli.post("/api/v1/auth/device/token",
                               json={"device_code": code["device_code"]})
        assert again.json()["code"] == "slow_down"
        # the page sends a browser without a login to the login page, and back
        page = await browser.get("/device", params={"code": code["user_code"]})
        assert page.status_code == 303
        assert page.headers["location"].startswith("/login?next=%2Fdevice%3Fcode%3D")
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        page = await browser.get("/device", params={"code": code["user_code"]})
        assert "gpu-box" in page.text and "Approve" in page.text
        # from another site: refused (login CSRF)
        forged = await browser.post("/device", headers={"Origin": "https://evil.example"},
                                    data={"user_code": code["user_code"],
                                          "decision": "approve"})
        assert forged.status_code == 403
        done = await browser.post("/device", headers={"Origin": sso.url},
                                  data={"user_code": code["user_code"], "decision": "approve"})
        assert "The CLI on gpu-box is signed in as bob" in done.text
        token = await cli.post("/api/v1/auth/device/token",
                               json={"device_code": code["device_code"]})
        assert token.status_code == 200, token.text
        bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
        me = await cli.get("/api/v1/auth/me", headers=bearer)
        assert me.json()["username"] == "bob"
        info = (await cli.get("/api/v1/auth/token", headers=bearer)).json()
        assert (info["kind"], info["name"]) == ("cli", "cli@gpu-box")
        assert info["idle_expires_at"] is not None
        used = await cli.post("/api/v1/auth/device/token",
                              json={"device_code": code["device_code"]})
        assert used.json()["code"] == "expired_token"
    approved = await rows(sso.app, action="auth.device.approve")
    assert [r.outcome for r in approved] == ["success"]


async def test_a_denied_code_gives_nothing(sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await ask(cli)
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        denied = await browser.post("/api/v1/auth/device/approve",
                                    headers={"Origin": sso.url},
                                    json={"user_code": code["user_code"].lower(),
                                          "approve": False})
        assert denied.status_code == 200, denied.text
        answer = await cli.post("/api/v1/auth/device/token",
                                json={"device_code": code["device_code"]})
        assert answer.json()["code"] == "access_denied"


async def test_an_unknown_code_is_named_on_the_page(sso: SsoManager) -> None:
    async with sso.client() as browser:
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        page = await browser.get("/device", params={"code": "BBBB-CCCC"})
        assert page.status_code == 404
        assert "no pending sign-in with the code BBBB-CCCC" in page.text


async def test_providers_say_how_to_sign_in(sso: SsoManager) -> None:
    async with sso.client() as anon:
        answer = (await anon.get("/api/v1/auth/providers")).json()
    assert answer["device_login"] is True
    assert {m["kind"]: m.get("start_url") for m in answer["methods"]} == {
        "password": None, "oidc": "/auth/oidc/start"}


async def test_guessing_codes_is_throttled_like_passwords(sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await ask(cli)
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        tries = [await browser.post("/api/v1/auth/device/approve",
                                    headers={"Origin": sso.url},
                                    json={"user_code": f"BBBB-CCC{c}", "approve": True})
                 for c in "BCDFGHJKLMN"]
        assert [t.status_code for t in tries] == [404] * 10 + [429]
        # the right code now waits too: the window must pass
        right = await browser.post("/api/v1/auth/device/approve", headers={"Origin": sso.url},
                                   json={"user_code": code["user_code"], "approve": True})
        assert right.status_code == 429
        assert "Retry-After" in right.headers


async def test_an_expired_code_gives_nothing(sso: SsoManager) -> None:
    async with sso.client() as cli:
        code = await ask(cli)
        async with sso.app.state.sessionmaker() as db:
            await db.execute(update(DeviceLoginRow).values(expires_at=utcnow()))
            await db.commit()
        answer = await cli.post("/api/v1/auth/device/token",
                                json={"device_code": code["device_code"]})
        assert answer.status_code == 400
        assert answer.json() == {"code": "expired_token", "field": None,
                                 "message": "the code expired; run gpuslice login again"}


async def test_a_cli_token_ends_with_the_sign_in_it_was_approved_from(
        sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await ask(cli)
        assert (await sso.sign_in(browser, "alice")).status_code == 303
        approved = await browser.post("/api/v1/auth/device/approve",
                                      headers={"Origin": sso.url},
                                      json={"user_code": code["user_code"], "approve": True})
        assert approved.status_code == 200, approved.text
        token = (await cli.post("/api/v1/auth/device/token",
                                json={"device_code": code["device_code"]})).json()
        bearer = {"Authorization": f"Bearer {token['access_token']}"}
        assert (await cli.get("/api/v1/auth/me", headers=bearer)).status_code == 200
        # her console logout keeps the CLI's token (and its re-check)
        assert (await browser.post("/api/v1/auth/logout",
                                   headers={"Origin": sso.url})).status_code == 200
        assert (await cli.get("/api/v1/auth/me", headers=bearer)).status_code == 200
        sso.provider.disable("alice")
        await recheck_now(sso.app)
        assert (await cli.get("/api/v1/auth/me", headers=bearer)).status_code == 401


async def test_device_sign_in_can_be_switched_off(
        _routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
        oidc_provider: OidcProvider) -> None:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url, oidc_provider,
                           auth={"device_login": False}) as manager, manager.client() as cli:
        answer = await cli.post("/api/v1/auth/device",
                                json={"client_host": "gpu-box", "os_user": "bob"})
        assert answer.status_code == 404
        assert answer.json()["code"] == "device_login_off"
        assert "auth.device_login = false" in answer.json()["message"]
        providers = (await cli.get("/api/v1/auth/providers")).json()
        assert providers["device_login"] is False


async def approved_code(sso: SsoManager, cli: httpx.AsyncClient, browser: httpx.AsyncClient,
                        username: str) -> dict[str, str]:
    """A device code ``username`` (signed in with ``browser``) approved; not yet polled."""
    code = await ask(cli)
    assert (await sso.sign_in(browser, username)).status_code == 303
    approved = await browser.post("/api/v1/auth/device/approve", headers={"Origin": sso.url},
                                  json={"user_code": code["user_code"], "approve": True})
    assert approved.status_code == 200, approved.text
    return code


async def test_a_code_approved_in_a_session_ended_since_gives_no_token(
        sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await approved_code(sso, cli, browser, "alice")
        async with sso.app.state.sessionmaker() as db:  # the provider's back-channel logout
            ended = await sessions.backchannel_logout(
                db, {"jti": "logout-d", "sub": "0b8c3f1e-alice", "iat": int(time.time())})
            assert ended == 1
            assert await db.scalar(select(func.count()).select_from(DeviceLoginRow)) == 0
        answer = await cli.post("/api/v1/auth/device/token",
                                json={"device_code": code["device_code"]})
        assert answer.status_code == 400
        assert answer.json()["code"] == "expired_token"


async def test_a_code_approved_by_a_user_disabled_since_gives_no_token(
        sso: SsoManager) -> None:
    async with sso.client() as cli, sso.client() as browser:
        code = await approved_code(sso, cli, browser, "alice")
        async with sso.app.state.sessionmaker() as db:
            await db.execute(update(UserRow).where(UserRow.username == "alice")
                             .values(is_active=False))
            await db.commit()
        answer = await cli.post("/api/v1/auth/device/token",
                                json={"device_code": code["device_code"]})
        assert answer.status_code == 400
        assert answer.json()["code"] == "expired_token"
        assert "the sign-in that approved the code has ended" in answer.json()["message"]
        async with sso.app.state.sessionmaker() as db:
            assert await db.scalar(select(func.count()).select_from(ApiTokenRow).where(
                ApiTokenRow.kind == "cli")) == 0


async def test_codes_looked_up_by_a_link_never_lock_the_user_out(sso: SsoManager) -> None:
    """Another site can send her browser (with its SameSite=Lax cookie) to /device?code=...
    as often as it likes: only the Origin-checked decision counts a wrong code."""
    async with sso.client() as cli, sso.client() as browser:
        code = await ask(cli)
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        looks = [await browser.get("/device", params={"code": f"BBBB-CCC{c}"},
                                   headers={"Referer": "https://evil.example/"})
                 for c in "BCDFGHJKLMNP"]
        assert [look.status_code for look in looks] == [404] * 12
        async with sso.app.state.sessionmaker() as db:
            assert (await db.scalars(select(LoginFailureRow))).all() == []
        right = await browser.post("/api/v1/auth/device/approve", headers={"Origin": sso.url},
                                   json={"user_code": code["user_code"], "approve": True})
        assert right.status_code == 200, right.text


async def test_a_code_with_other_characters_is_refused_before_any_look_up(
        sso: SsoManager) -> None:
    async with sso.client() as browser:
        assert (await sso.sign_in(browser, "bob")).status_code == 303
        said = "the code is letters, digits, spaces and dashes as the CLI printed it"
        page = await browser.get("/device", params={"code": "\x00"})
        assert page.status_code == 422 and said in page.text
        form = await browser.post("/device", headers={"Origin": sso.url},
                                  data={"user_code": "BBBB\x00CCCC", "decision": "approve"})
        assert form.status_code == 422 and said in form.text
        api = await browser.post("/api/v1/auth/device/approve", headers={"Origin": sso.url},
                                 json={"user_code": "BBBB;CCCC", "approve": True})
        assert api.status_code == 422
        assert api.json()["field"] == "user_code" and said in api.json()["message"]


async def test_without_a_public_url_the_device_link_is_the_managers_own_address(
        _routed_app: FastAPI, settings: ManagerSettings) -> None:
    """Never the request's Host: a phishing host that relays the request must not get its
    own name into the link the CLI prints."""
    assert not settings.auth.public_url
    bind(_routed_app, settings)
    port = free_port()
    server = ManagerServer(_routed_app, "127.0.0.1", port)  # its lifespan, as `manager serve`
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as cli:
            answer = await cli.post("/api/v1/auth/device", headers={"Host": "evil.example"},
                                    json={"client_host": "gpu-box", "os_user": "bob"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["verification_uri"] == f"http://127.0.0.1:{port}/device"
    finally:
        server.exit()
        await serving
