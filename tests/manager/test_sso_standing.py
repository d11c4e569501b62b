"""Tokens of a user removed at the identity provider end (issue 42, identity.md §6.4 "Standing",
§6.8): an SSO user's API and CLI tokens answer 401 sso_required once their standing (renewed by
each sign-in and re-check at the provider) has passed; API tokens of SSO users are capped."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import UserRow
from tests.idp.oidc import OidcProvider
from tests.manager.audit_helpers import rows
from tests.manager.conftest import Client, UserFactory
from tests.manager.sso_helpers import SsoManager, allowed_code, pkce, recheck_now, sso_manager
from tests.waits import scaled

MESSAGE = ("sign in with single sign-on again to keep using your tokens: "
           "gpuslice login URL --sso")


@pytest.fixture
async def sso(_routed_app: FastAPI, tmp_path: Path, migrated_database_url: str,
              oidc_provider: OidcProvider) -> AsyncIterator[SsoManager]:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url,
                           oidc_provider) as manager:
        yield manager


async def standing(app: FastAPI, username: str) -> datetime | None:
    async with app.state.sessionmaker() as db:
        return await db.scalar(select(UserRow.standing_until)
                               .where(UserRow.username == username))


async def set_standing(app: FastAPI, username: str, until: datetime | None) -> None:
    async with app.state.sessionmaker() as db:
        await db.execute(update(UserRow).where(UserRow.username == username)
                         .values(standing_until=until))
        await db.commit()


async def tokens_of(sso: SsoManager, http: httpx.AsyncClient) -> tuple[str, str]:
    """With ``http`` signed in: an API token made by its login cookie, and a CLI token
    allowed from it (as `gpuslice login URL --sso` gets one)."""
    made = await http.post("/api/v1/auth/tokens", headers={"Origin": sso.url},
                           json={"name": "script"})
    assert made.status_code == 201, made.text
    verifier, challenge = pkce()
    code = await allowed_code(sso, http, challenge)
    cli = await http.post("/api/v1/auth/cli/token",
                          json={"code": code, "code_verifier": verifier})
    assert cli.status_code == 200, cli.text
    return made.json()["token"], cli.json()["access_token"]


async def me(sso: SsoManager, token: str) -> httpx.Response:
    async with sso.client() as http:
        return await http.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"})


async def cli(sso: SsoManager, token: str, tmp_path: Path, *args: str
              ) -> tuple[int, str, str]:
    """The real CLI with ``token`` (GPUSLICE_TOKEN): exit code, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env |= {"GPUSLICE_URL": sso.url, "GPUSLICE_TOKEN": token,
            "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuslice.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), scaled(60))
    return process.returncode or 0, out.decode(), err.decode()


async def test_tokens_end_when_standing_passes_and_a_sign_in_restores_them(
        sso: SsoManager, tmp_path: Path) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        until = await standing(sso.app, "alice")
        assert until is not None
        assert abs(until - (utcnow() + timedelta(days=30))) < timedelta(minutes=5)
        api, cli_token = await tokens_of(sso, http)
        shown = datetime.fromisoformat((await me(sso, api)).json()["standing_until"])
        assert abs(shown - until) < timedelta(seconds=1)
        code, out, err = await cli(sso, cli_token, tmp_path, "auth", "status")
        assert code == 0, err
        assert (f"sso:     sign in with single sign-on again by {until:%Y-%m-%d %H:%M} UTC"
                in out), out
        await set_standing(sso.app, "alice", utcnow() - timedelta(seconds=1))
        for token in (api, cli_token):
            answer = await me(sso, token)
            assert answer.status_code == 401
            assert answer.json()["code"] == "sso_required"
            assert answer.json()["message"] == MESSAGE
        # the console's login cookie is bound to its provider session: not this rule's
        assert (await http.get("/api/v1/auth/me")).status_code == 200
    rejected = await rows(sso.app, action="auth.token_rejected", reason="sso_required")
    assert {r.actor_name for r in rejected} == {"alice"} and len(rejected) == 2
    code, out, err = await cli(sso, api, tmp_path, "token", "list")
    assert code != 0 and out == ""
    assert err.strip() == (f"error: sign in with single sign-on again to keep using your "
                           f"tokens: gpuslice login {sso.url} --sso")
    async with sso.client() as again:  # a new sign-in at the provider: standing renewed
        assert (await sso.sign_in(again, "alice")).status_code == 303
    for token in (api, cli_token):
        assert (await me(sso, token)).status_code == 200


async def test_a_recheck_renews_standing_and_a_refused_one_does_not(sso: SsoManager) -> None:
    async with sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        api, _ = await tokens_of(sso, http)
        soon = utcnow() + timedelta(minutes=1)
        await set_standing(sso.app, "alice", soon)
        await recheck_now(sso.app)  # the provider still knows her
        renewed = await standing(sso.app, "alice")
        assert renewed is not None and renewed > soon + timedelta(days=29)
        sso.provider.disable("alice")
        await set_standing(sso.app, "alice", soon)
        await recheck_now(sso.app)  # invalid_grant: her session's tokens end, not extended
        assert await standing(sso.app, "alice") == soon
        assert (await http.get("/api/v1/auth/me")).status_code == 401
    assert (await me(sso, api)).status_code == 200  # until her standing passes
    await set_standing(sso.app, "alice", utcnow() - timedelta(seconds=1))
    assert (await me(sso, api)).json()["code"] == "sso_required"


async def test_an_sso_users_api_token_is_capped(_routed_app: FastAPI, tmp_path: Path,
                                                migrated_database_url: str,
                                                oidc_provider: OidcProvider) -> None:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url, oidc_provider,
                           api_token_max_days=10) as sso, sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        for asked, days in ((None, 10), (365, 10), (5, 5)):
            body: dict[str, Any] = {"name": f"t{asked}", "expires_in_days": asked}
            made = await http.post("/api/v1/auth/tokens", headers={"Origin": sso.url},
                                   json=body)
            assert made.status_code == 201, made.text
            expires = datetime.fromisoformat(made.json()["expires_at"])
            assert abs(expires - (utcnow() + timedelta(days=days))) < timedelta(minutes=5)
        code, out, err = await cli(sso, made.json()["token"], tmp_path, "token", "create", "x")
        assert code == 0, err
        ends = (utcnow() + timedelta(days=10)).strftime("%Y-%m-%d")
        assert f"it expires {ends}" in out


async def test_offline_max_age_0_sets_no_bound(_routed_app: FastAPI, tmp_path: Path,
                                               migrated_database_url: str,
                                               oidc_provider: OidcProvider) -> None:
    async with sso_manager(_routed_app, tmp_path, migrated_database_url, oidc_provider,
                           offline_max_age=0) as sso, sso.client() as http:
        assert (await sso.sign_in(http, "alice")).status_code == 303
        assert await standing(sso.app, "alice") is None
        api, cli_token = await tokens_of(sso, http)
        for token in (api, cli_token):
            assert (await me(sso, token)).status_code == 200


async def test_local_users_tokens_are_not_bound_by_standing(app: FastAPI,
                                                            make_user: UserFactory) -> None:
    carol: Client = await make_user("carol")
    made = await carol.post("/api/v1/auth/tokens", json={"name": "script"})
    assert made.status_code == 201 and made.json()["expires_at"] is None
    await set_standing(app, "carol", utcnow() - timedelta(days=1))
    answer = await carol.get("/api/v1/auth/me", headers={
        "Authorization": f"Bearer {made.json()['token']}"})
    assert answer.status_code == 200 and answer.json()["standing_until"] is not None
