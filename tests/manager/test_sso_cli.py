"""`gpuslice login URL --sso` through a browser (issue 42, identity.md §6.7, §14 C2, C3): the
CLI's loopback listener, the /auth/cli page (allowed in Chromium after signing in with single
sign-on), the code exchanged once with the CLI's PKCE verifier."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.models import UserRow
from gpuslice.manager.services.sso import sessions
from tests.browser import ARTIFACTS
from tests.idp.oidc import OidcProvider
from tests.manager.sso_helpers import SsoManager, allowed_code, pkce, sso_manager
from tests.waits import scaled


@pytest.fixture
async def sso(_routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
              oidc_provider: OidcProvider) -> AsyncIterator[SsoManager]:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url,
                           oidc_provider) as manager:
        yield manager


async def test_the_code_goes_once_to_the_verifier_it_was_made_for(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "bob")).status_code == 303
        verifier, challenge = pkce()
        code = await allowed_code(sso, http, challenge)
        wrong = await http.post("/api/v1/auth/cli/token",
                                json={"code": code, "code_verifier": pkce()[0]})
        assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_grant"
        # the wrong verifier used the code up: the right one comes too late
        late = await http.post("/api/v1/auth/cli/token",
                               json={"code": code, "code_verifier": verifier})
        assert late.status_code == 400
        code = await allowed_code(sso, http, challenge)
        token = await http.post("/api/v1/auth/cli/token",
                                json={"code": code, "code_verifier": verifier})
        assert token.status_code == 200, token.text
        info = await http.get("/api/v1/auth/token", headers={
            "Authorization": f"Bearer {token.json()['access_token']}"})
        assert (info.json()["kind"], info.json()["name"]) == ("cli", "cli@box")
        replay = await http.post("/api/v1/auth/cli/token",
                                 json={"code": code, "code_verifier": verifier})
        assert replay.status_code == 400


@pytest.mark.parametrize("port", ["80@evil.example", "80", "65536", "4000.5", "-1", "²",
                                  "\u0664\u0660\u0660\u0660\u0660", "040000"])
async def test_the_redirect_is_built_from_a_port_number_only(sso: SsoManager,
                                                              port: str) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "bob")).status_code == 303
        page = await http.get("/auth/cli", params={
            "port": port, "state": "s" * 16, "code_challenge": pkce()[1], "host": "box"})
        assert page.status_code == 422
        assert "port must be a number from 1024 to 65535" in page.text


@pytest.mark.parametrize("port", ["²", "\u0664\u0660\u0660\u0660\u0660"])
async def test_allow_names_a_port_that_is_not_ascii_digits(sso: SsoManager, port: str) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "bob")).status_code == 303
        answer = await http.post("/auth/cli/allow", headers={"Origin": sso.url}, data={
            "port": port, "state": "s" * 16, "code_challenge": "b" * 43, "host": "box",
            "decision": "allow"})
        assert answer.status_code == 422
        assert "port must be a number from 1024 to 65535" in answer.text


async def test_allow_from_another_site_is_refused(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "bob")).status_code == 303
        answer = await http.post("/auth/cli/allow", headers={
            "Origin": "https://evil.example", "Accept": "application/json"}, data={
            "port": "40000", "state": "s" * 16, "code_challenge": pkce()[1],
            "decision": "allow"})
        assert answer.status_code == 403
        assert answer.json()["code"] == "origin_mismatch"


async def test_gpuslice_login_sso_through_chromium(sso: SsoManager, browser: Any,
                                                  tmp_path: Path) -> None:
    opener = tmp_path / "open-url"  # BROWSER: hands the address to the test's Chromium
    opened = tmp_path / "opened-url"
    opener.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {opened}.part && "
                      f"mv {opened}.part {opened}\n")
    opener.chmod(0o755)
    config = tmp_path / "client.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GPUSLICE_URL", "GPUSLICE_TOKEN")}
    env |= {"GPUSLICE_CLIENT_CONFIG": str(config), "BROWSER": str(opener)}
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuslice.cli.main", "login", sso.url, "--sso",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    deadline = asyncio.get_running_loop().time() + scaled(30)
    while not opened.exists():
        assert asyncio.get_running_loop().time() < deadline, "the CLI opened no browser"
        await asyncio.sleep(0.05)
    start = opened.read_text()
    port = int(parse_qs(urlsplit(start).query)["port"][0])
    async with httpx.AsyncClient() as stranger:  # DNS rebinding: another Host is refused
        refused = await stranger.get(f"http://127.0.0.1:{port}/callback?code=x&state=y",
                                     headers={"Host": "evil.example"})
    assert refused.status_code == 400
    page = await browser.new_page()
    await page.goto(start)  # not signed in: the login page, then the provider
    await page.click("text=Log in with Test IdP")
    await page.wait_for_selector("input[name=login]", timeout=scaled(30) * 1000)
    await page.fill("input[name=login]", "bob")
    await page.fill("input[name=password]", "bob-password")
    await page.click("button[type=submit]")
    await page.wait_for_selector("text=Sign in the gpuslice CLI?", timeout=scaled(30) * 1000)
    await page.screenshot(path=str(ARTIFACTS / "sso-cli-1-allow.png"))
    await page.click("button[value=allow]")
    await page.wait_for_selector("text=The gpuslice CLI is signed in",
                                 timeout=scaled(30) * 1000)
    assert page.url.startswith(f"http://127.0.0.1:{port}/callback?")
    out, err = await asyncio.wait_for(cli.communicate(), scaled(30))
    assert cli.returncode == 0, (out, err)
    assert re.search(rf"logged in to {re.escape(sso.url)} as bob", out.decode())
    token = json.loads(config.read_text())["token"]
    async with httpx.AsyncClient(base_url=sso.url) as http:
        me = await http.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["username"] == "bob"


@pytest.mark.parametrize("ended", ["logout", "disabled"])
async def test_a_code_allowed_in_a_sign_in_ended_since_gives_no_token(
        sso: SsoManager, ended: str) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        verifier, challenge = pkce()
        code = await allowed_code(sso, http, challenge)
        async with sso.app.state.sessionmaker() as db:
            if ended == "logout":  # the provider's back-channel logout
                await sessions.backchannel_logout(
                    db, {"jti": "logout-c", "sub": "0b8c3f1e-alice", "iat": int(time.time())})
            else:
                await db.execute(update(UserRow).where(UserRow.username == "alice")
                                 .values(is_active=False))
                await db.commit()
        token = await http.post("/api/v1/auth/cli/token",
                                json={"code": code, "code_verifier": verifier})
        assert token.status_code == 400, token.text
        assert token.json()["code"] == "invalid_grant"
