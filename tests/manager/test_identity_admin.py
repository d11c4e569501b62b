"""Admins link an account to a provider's user (the answer an identity conflict names), see
and unlink it; nobody else can (issue 42)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from fastapi import FastAPI

from gpuslice.manager.services.identity import Profile, SignInRefused, sign_in
from gpuslice.manager.settings import OidcSettings
from tests.manager.conftest import Client, UserFactory
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
MAPPING = OidcSettings(issuer="http://127.0.0.1:1", allow_all=True)


async def _sign_in(app: FastAPI, subject: str) -> str:
    async with app.state.sessionmaker() as db:
        user = await sign_in(db, Profile(provider="oidc", subject=subject, username="alice",
                                         groups=()), MAPPING)
        return user.username


async def test_a_conflict_is_resolved_by_the_link_it_names(
        app: FastAPI, admin: Client, make_user: UserFactory) -> None:
    alice = await make_user("alice")
    try:
        await _sign_in(app, "sub-1")
        raise AssertionError("a local alice was taken over")
    except SignInRefused as refused:
        assert "--provider oidc --subject sub-1" in refused.message
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    path = f"/api/v1/users/{users['alice']}/identities"
    r = await alice.post(path, json={"provider": "oidc", "subject": "sub-1"})
    assert r.status_code == 403, r.text  # only admins link
    r = await admin.post(path, json={"provider": "oidc", "subject": "sub-1"})
    assert r.status_code == 201, r.text
    assert await _sign_in(app, "sub-1") == "alice"
    [listed] = (await admin.get(path)).json()
    assert (listed["provider"], listed["subject"], listed["groups"]) == ("oidc", "sub-1", [])
    # one identity per provider per account, one account per identity
    r = await admin.post(path, json={"provider": "oidc", "subject": "sub-2"})
    assert (r.status_code, r.json()["code"]) == (409, "already_linked")
    r = await admin.post(f"/api/v1/users/{users['admin']}/identities",
                         json={"provider": "oidc", "subject": "sub-1"})
    assert (r.status_code, r.json()["code"]) == (409, "identity_taken")
    r = await admin.post(path, json={"provider": "saml", "subject": "x"})
    assert r.status_code == 422 and "oidc" in r.text
    r = await admin.delete(f"{path}/{listed['id']}")
    assert r.status_code == 204, r.text
    r = await admin.delete(f"{path}/{listed['id']}")
    assert r.status_code == 404, r.text


async def test_the_cli_shows_links_and_unlinks(
        app: FastAPI, base_url: str, admin: Client, make_user: UserFactory,
        tmp_path: Path) -> None:
    await make_user("alice")
    token = admin.headers["Authorization"].split()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(tmp_path), "GPUSLICE_URL": base_url, "GPUSLICE_TOKEN": token}

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, [GPUSLICE, "admin", "user", *args], capture_output=True,
            text=True, env=env, timeout=scaled(60), check=False)

    done = await cli("link", "alice", "--provider", "ldap", "--subject", "uuid-a")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "alice is linked to ldap user uuid-a"
    done = await cli("show", "alice", "--json")
    assert [i["subject"] for i in json.loads(done.stdout)["identities"]] == ["uuid-a"]
    done = await cli("unlink", "alice", "--provider", "ldap")
    assert done.stdout.strip() == "alice is no longer linked to ldap user uuid-a"
    done = await cli("unlink", "alice", "--provider", "ldap")
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "alice is not linked to a user at ldap" in done.stderr
    done = await cli("show", "alice")
    assert "signs in with a password here" in done.stdout
    assert "no identity at a provider" in done.stdout
