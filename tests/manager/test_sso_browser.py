"""Single sign-on in real Chromium (issue 42, identity.md §14 A1, A3, A7, C1): the login page's
"Log in with" link, the test provider's own login page, the console after it; refusals as one
line on the login page; `gpuslice login --sso --device` approved in the browser. Each test
leaves screenshots of what the user saw in the artifacts folder."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from gpuslice.manager.db.models import UserRow
from tests.browser import ARTIFACTS, console_ready_async
from tests.idp.oidc import OidcProvider, client
from tests.idp.oidc import oidc_provider as start_oidc_provider
from tests.manager.audit_helpers import rows
from tests.manager.sso_helpers import (
    SsoManager,
    link_group,
    members_of,
    sso_manager,
    usernames,
)
from tests.ports import free_port
from tests.waits import scaled


@pytest.fixture
async def sso(_routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
              oidc_provider: OidcProvider) -> AsyncIterator[SsoManager]:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url,
                           oidc_provider) as manager:
        yield manager


async def sign_in_at_provider(page: Any, sso: SsoManager, username: str, shots: str) -> None:
    """From the login page: the link, then the provider's login form as ``username``."""
    await page.goto(f"{sso.url}/login?next=%2F%23%2Fsessions")
    await page.screenshot(path=str(ARTIFACTS / f"{shots}-1-login-page.png"))
    await page.click("text=Log in with Test IdP")
    await page.wait_for_selector("input[name=login]", timeout=scaled(30) * 1000)
    await page.fill("input[name=login]", username)
    await page.fill("input[name=password]", f"{username}-password")
    await page.screenshot(path=str(ARTIFACTS / f"{shots}-2-provider.png"))
    await page.click("button[type=submit]")


async def test_alice_signs_in_through_the_provider_into_the_console(
        sso: SsoManager, browser: Any) -> None:
    await link_group(sso.app, "vision", "vision")
    page = await browser.new_page()
    await sign_in_at_provider(page, sso, "alice", "sso-alice")
    await page.wait_for_url(f"{sso.url}/#/sessions", timeout=scaled(30) * 1000)
    await console_ready_async(page, "#sessions")
    await page.screenshot(path=str(ARTIFACTS / "sso-alice-3-console.png"))
    assert "alice" in await page.inner_text("body")
    assert (await members_of(sso.app, "vision")) == {"alice": "idp"}


async def test_a_user_in_no_allowed_group_sees_why_and_no_account_is_made(
        sso: SsoManager, browser: Any) -> None:
    page = await browser.new_page()
    await sign_in_at_provider(page, sso, "erin", "sso-not-allowed")
    line = page.locator("p.error")
    await line.wait_for(timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-not-allowed-3-refused.png"))
    assert await line.inner_text() == ("you are not in a group allowed to use gpuslice (ask "
                                       "to join gpu-users)")
    assert "erin" not in await usernames(sso.app)


async def test_a_local_alice_is_not_taken_over(sso: SsoManager, browser: Any) -> None:
    async with sso.app.state.sessionmaker() as db:
        db.add(UserRow(username="alice", password_hash="x", role="user"))
        await db.commit()
    page = await browser.new_page()
    await sign_in_at_provider(page, sso, "alice", "sso-conflict")
    line = page.locator("p.error")
    await line.wait_for(timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-conflict-3-refused.png"))
    assert (await line.inner_text()).startswith("an account named alice already exists and "
                                                "is not linked to your sign-in")
    cookies = await page.context.cookies(sso.url)
    assert "gpuslice_login" not in {c["name"] for c in cookies}


async def test_gpuslice_login_sso_device_approved_in_chromium(
        sso: SsoManager, browser: Any, tmp_path: Path) -> None:
    config = tmp_path / "client.json"
    env = {**os.environ, "GPUSLICE_CLIENT_CONFIG": str(config)}
    env.pop("GPUSLICE_URL", None)
    env.pop("GPUSLICE_TOKEN", None)
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuslice.cli.main", "login", sso.url, "--sso", "--device",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    assert cli.stdout is not None
    first = (await asyncio.wait_for(cli.stdout.readline(), scaled(30))).decode()
    code = re.search(r"enter ([B-Z]{4}-[B-Z]{4}) \(valid 10 min\)", first)
    assert code, first
    page = await browser.new_page()
    await page.goto(f"{sso.url}/device?code={code.group(1)}")  # not signed in: login first
    await page.click("text=Log in with Test IdP")
    await page.wait_for_selector("input[name=login]", timeout=scaled(30) * 1000)
    await page.fill("input[name=login]", "bob")
    await page.fill("input[name=password]", "bob-password")
    await page.click("button[type=submit]")
    await page.wait_for_selector("text=Sign in the gpuslice CLI?", timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-device-1-approve.png"))
    assert code.group(1) in await page.inner_text("body")
    await page.click("button[value=approve]")
    await page.wait_for_selector("#done", timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-device-2-done.png"))
    out, err = await asyncio.wait_for(cli.communicate(), scaled(30))
    assert cli.returncode == 0, (out, err)
    assert f"logged in to {sso.url} as bob" in out.decode()
    token = json.loads(config.read_text())["token"]
    async with httpx.AsyncClient(base_url=sso.url) as http:
        me = await http.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["username"] == "bob"


@pytest.fixture
async def sso_with_backchannel(_routed_app: FastAPI, tmp_path: Path,
                               migrated_database_url: str) -> AsyncIterator[SsoManager]:
    """A provider whose client registers this manager's back-channel logout URI (exact,
    port included: the manager's port is chosen first)."""
    port = free_port()
    registered = client(backchannel_logout_uri=f"http://127.0.0.1:{port}"
                        "/auth/oidc/backchannel-logout")
    with start_oidc_provider(tmp_path / "idp", clients=[registered]) as provider:
        async with sso_manager(_routed_app, tmp_path, migrated_database_url, provider,
                               port=port) as manager:
            yield manager


async def console_cookie_works(sso: SsoManager, page: Any) -> bool:
    cookies = {c["name"]: c["value"] for c in await page.context.cookies(sso.url)}
    if "gpuslice_login" not in cookies:
        return False
    async with httpx.AsyncClient(base_url=sso.url) as http:
        me = await http.get("/api/v1/auth/me",
                            cookies={"gpuslice_login": cookies["gpuslice_login"]})
    return me.status_code == 200


async def test_console_logout_signs_out_at_the_provider_and_comes_back(
        sso_with_backchannel: SsoManager, browser: Any) -> None:
    sso = sso_with_backchannel
    page = await browser.new_page()
    await sign_in_at_provider(page, sso, "alice", "sso-logout")
    await console_ready_async(page, "#sessions")
    cookie = {c["name"]: c["value"] for c in await page.context.cookies(sso.url)}
    await page.click("#logout")
    await page.wait_for_selector("text=Yes, sign me out", timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-logout-1-provider.png"))
    await page.click("text=Yes, sign me out")
    await page.wait_for_url(f"{sso.url}/login?logged_out=1", timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-logout-2-back.png"))
    assert "You are signed out of gpuslice." in await page.inner_text("body")
    async with httpx.AsyncClient(base_url=sso.url) as http:
        me = await http.get("/api/v1/auth/me",
                            cookies={"gpuslice_login": cookie["gpuslice_login"]})
    assert me.status_code == 401


async def test_signing_out_at_the_provider_ends_the_console_by_back_channel(
        sso_with_backchannel: SsoManager, browser: Any) -> None:
    sso = sso_with_backchannel
    page = await browser.new_page()
    await sign_in_at_provider(page, sso, "alice", "sso-backchannel")
    await console_ready_async(page, "#sessions")
    assert await console_cookie_works(sso, page)
    end_session = sso.provider.metadata()["end_session_endpoint"]
    await page.goto(end_session)  # the provider's own sign-out page, not gpuslice's
    await page.click("text=Yes, sign me out")
    await page.wait_for_selector("#signed-out", timeout=scaled(30) * 1000)
    deadline = asyncio.get_running_loop().time() + scaled(5)
    while await console_cookie_works(sso, page):
        assert asyncio.get_running_loop().time() < deadline, \
            "the console still works 5 s after the provider's sign-out"
        await asyncio.sleep(0.1)
    ended = await rows(sso.app, action="auth.idp_logout")
    assert len(ended) == 1
