"""Sign-in with an LDAP directory (issue 42), against a real slapd (``ldap_directory``): the
password login and the /login form ask the directory for users without a local account; the
re-check loop disables users the directory dropped and syncs projects from groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from fastapi import FastAPI

from gpuslice.manager.loop_table import run_once
from gpuslice.manager.services.identity.directory import Directory, DirectoryDown
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.idp.ldap import Directory as SlapdDirectory
from tests.idp.ldap import make_ca
from tests.manager.audit_helpers import rows
from tests.manager.conftest import Client, client_for
from tests.manager.ldap_helpers import ldap_settings, manager_settings

pytestmark = pytest.mark.loops_off("ldap_recheck")  # each test runs its passes itself
ORIGIN = "http://manager"


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str,
             ldap_directory: SlapdDirectory) -> ManagerSettings:
    return manager_settings(tmp_path, migrated_database_url, ldap_directory)


async def sign_in(anon: Client, username: str, password: str | None = None) -> Any:
    return await anon.post("/api/v1/auth/login", json={
        "username": username, "password": password or f"{username}-password"})


async def vision(admin: Client) -> None:
    r = await admin.post("/api/v1/projects", json={"name": "vision"})
    assert r.status_code == 201, r.text
    r = await admin.put("/api/v1/projects/vision/idp-groups",
                        json={"provider": "ldap", "groups": ["vision"]})
    assert r.status_code == 200, r.text
    assert r.json() == [{"provider": "ldap", "groups": ["vision"]}]


async def members(admin: Client, project: str = "vision") -> list[str]:
    r = await admin.get(f"/api/v1/projects/{project}")
    assert r.status_code == 200, r.text
    return r.json()["members"]


async def test_alice_signs_in_with_her_directory_password(
        app: FastAPI, admin: Client, anon: Client, ldap_directory: SlapdDirectory) -> None:
    await vision(admin)
    r = await sign_in(anon, "alice")
    assert r.status_code == 200, r.text
    async with client_for(app, r.json()["access_token"]) as alice:
        me = (await alice.get("/api/v1/auth/me")).json()
    assert me["username"] == "alice" and me["source"] == "ldap"
    assert "alice" in await members(admin)
    login_rows = await rows(app, action="auth.login", actor_name="alice")
    assert [(row.outcome, json.loads(row.details or "{}").get("method"))
            for row in login_rows] == [("success", "ldap")]
    provisioned = await rows(app, action="user.provision")
    assert [json.loads(row.details or "{}")["provider"] for row in provisioned] == ["ldap"]
    # the browser's form takes the same way
    form = {"username": "alice", "password": "alice-password", "next": "/sessions"}
    done = await anon.post("/login", data=form, headers={"Origin": ORIGIN})
    assert done.status_code == 303 and "gpuslice_login=" in done.headers["set-cookie"]
    # a second sign-in is the same user (linked by entryUUID)
    users = (await admin.get("/api/v1/users")).json()
    assert [u["username"] for u in users if u["source"] == "ldap"] == ["alice"]


async def test_refusals_are_one_line_each(app: FastAPI, admin: Client, anon: Client,
                                          ldap_directory: SlapdDirectory) -> None:
    wrong = await sign_in(anon, "alice", "not-her-password")
    assert wrong.status_code == 401
    assert wrong.json()["message"] == "wrong username or password"
    nobody = await sign_in(anon, "zed")
    assert nobody.status_code == 401 and nobody.json()["code"] == "bad_credentials"
    locked = await sign_in(anon, "dave")
    assert locked.status_code == 403, locked.text
    assert locked.json()["code"] == "account_locked"
    assert "locked" in locked.json()["message"]
    assert "\n" not in locked.json()["message"]
    ldap_directory.remove_from_group("carol", "gpu-users")
    carol = await sign_in(anon, "carol")
    assert carol.status_code == 403, carol.text
    assert carol.json()["message"].startswith(
        "you are not in a group allowed to use gpuslice")
    names = [u["username"] for u in (await admin.get("/api/v1/users")).json()]
    assert "carol" not in names and "dave" not in names  # no account made
    refused = await rows(app, action="auth.login", outcome="failure")
    assert {row.actor_name: row.reason for row in refused} == {
        "alice": "bad_credentials", "zed": "bad_credentials", "dave": "account_locked",
        "carol": "not_allowed"}


async def test_empty_password_and_injection_never_reach_a_bind(
        app: FastAPI, anon: Client, settings: ManagerSettings,
        ldap_directory: SlapdDirectory, monkeypatch: pytest.MonkeyPatch) -> None:
    binds: list[str] = []
    real_bind = Directory.bind

    def counted(self: Directory, dn: str, password: str) -> bool:
        binds.append(dn)
        return real_bind(self, dn, password)

    monkeypatch.setattr(Directory, "bind", counted)
    # the API's schema refuses an empty password; the form reaches the login with one
    empty = await anon.post("/login", data={"username": "alice", "password": ""},
                            headers={"Origin": ORIGIN})
    assert empty.status_code == 401 and "wrong username or password" in empty.text
    assert binds == []
    for name in ("*)(uid=*", "*", "alice)(|(uid=*"):
        r = await sign_in(anon, name, "x")
        assert r.status_code == 401 and r.json()["code"] == "bad_credentials", name
    assert binds == []
    # below the login's name check, the filter is escaped: a wildcard matches nobody
    directory = Directory(settings.auth.ldap)
    assert not directory.bind(ldap_directory.user_dn("alice"), "")  # refused, not sent
    assert directory.find_user("*") is None and directory.find_user("al*") is None
    assert directory.find_user("alice") is not None


async def test_a_local_account_is_never_taken_over(
        app: FastAPI, admin: Client, anon: Client, ldap_directory: SlapdDirectory) -> None:
    r = await admin.post("/api/v1/users", json={"username": "alice", "password": "local-pw-1"})
    assert r.status_code == 201, r.text
    taken = await sign_in(anon, "alice")
    assert taken.status_code == 403, taken.text
    message = taken.json()["message"]
    assert taken.json()["code"] == "identity_conflict"
    assert "already exists" in message and "gpuslice admin user link alice" in message
    assert (await sign_in(anon, "alice", "local-pw-1")).status_code == 200
    users = {u["username"]: u for u in (await admin.get("/api/v1/users")).json()}
    assert users["alice"]["source"] == "local"


async def test_recheck_follows_groups_and_ends_tokens(
        app: FastAPI, admin: Client, anon: Client, ldap_directory: SlapdDirectory) -> None:
    await vision(admin)
    token = (await sign_in(anon, "alice")).json()["access_token"]
    bob_token = (await sign_in(anon, "bob")).json()["access_token"]
    assert "alice" in await members(admin)
    ldap_directory.remove_from_group("alice", "vision")
    await run_once(app, "ldap_recheck")
    assert "alice" not in await members(admin)
    async with client_for(app, token) as alice, client_for(app, bob_token) as bob:
        assert (await alice.get("/api/v1/auth/me")).status_code == 200
        ldap_directory.lock("alice")
        await run_once(app, "ldap_recheck")
        gone = await alice.get("/api/v1/auth/me")
        assert gone.status_code == 401, gone.text
        assert (await bob.get("/api/v1/auth/me")).status_code == 200
        users = {u["username"]: u for u in (await admin.get("/api/v1/users")).json()}
        assert users["alice"]["is_active"] is False
        assert users["alice"]["disabled_reason"] == "directory: disabled"
        # unlocked: enabled again at the next pass, and she signs in
        ldap_directory.unlock("alice")
        await run_once(app, "ldap_recheck")
        assert (await sign_in(anon, "alice")).status_code == 200
        # removed: bob's tokens end at the next pass
        ldap_directory.remove_user("bob")
        await run_once(app, "ldap_recheck")
        assert (await bob.get("/api/v1/auth/me")).status_code == 401
    deprovisioned = await rows(app, action="user.deprovision")
    assert [(json.loads(r.details)["user"], json.loads(r.details)["reason"])
            for r in deprovisioned] == [
        ("alice", "disabled"), ("bob", "not found")]


async def test_an_admin_disable_outlives_the_directory(
        app: FastAPI, admin: Client, anon: Client, ldap_directory: SlapdDirectory) -> None:
    assert (await sign_in(anon, "alice")).status_code == 200
    users = {u["username"]: u for u in (await admin.get("/api/v1/users")).json()}
    r = await admin.patch(f"/api/v1/users/{users['alice']['id']}", json={"is_active": False})
    assert r.status_code == 200, r.text
    await run_once(app, "ldap_recheck")
    refused = await sign_in(anon, "alice")
    assert refused.status_code == 403 and "disabled" in refused.json()["message"]


async def test_directory_down_refuses_its_users_not_the_admin(
        app: FastAPI, admin: Client, anon: Client, settings: ManagerSettings,
        ldap_directory: SlapdDirectory) -> None:
    token = (await sign_in(anon, "alice")).json()["access_token"]
    ldap_directory.process.terminate()
    ldap_directory.process.wait(timeout=15)
    down = await sign_in(anon, "alice")
    assert down.status_code == 503, down.text
    error = down.json()
    assert error["code"] == "directory_unavailable"
    assert error["message"].startswith(f"the directory at 127.0.0.1:{ldap_directory.port} "
                                       "did not answer")
    assert error["message"].endswith("local accounts can still sign in")
    creds = dict(line.split(": ", 1) for line in
                 (settings.data_dir / "admin-credentials").read_text().splitlines())
    assert (await sign_in(anon, creds["username"], creds["password"])).status_code == 200
    # the re-check keeps signed-in users' tokens while the directory is away
    await run_once(app, "ldap_recheck")
    async with client_for(app, token) as alice:
        assert (await alice.get("/api/v1/auth/me")).status_code == 200


async def test_admin_ldap_test_says_what_gpuslice_would_do(
        app: FastAPI, admin: Client, make_user: Any, ldap_directory: SlapdDirectory) -> None:
    await vision(admin)
    r = await admin.get("/api/v1/ldap/test", params={"user": "alice"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["found"] is True and body["subject"] == ldap_directory.entry_uuid("alice")
    assert sorted(body["groups"]) == ["gpu-users", "vision"]
    assert body["allowed"] is True and body["projects"] == ["vision"]
    assert body["dn"] == ldap_directory.user_dn("alice")
    assert (await admin.get("/api/v1/ldap/test", params={"user": "nobody"})).json()[
        "found"] is False
    assert (await admin.get("/api/v1/ldap/test")).status_code == 200
    user = await make_user()
    assert (await user.get("/api/v1/ldap/test")).status_code == 403


async def test_a_directory_users_password_is_the_directorys(
        app: FastAPI, admin: Client, anon: Client, ldap_directory: SlapdDirectory) -> None:
    token = (await sign_in(anon, "alice")).json()["access_token"]
    async with client_for(app, token) as alice:
        r = await alice.post("/api/v1/auth/password", json={
            "current_password": "alice-password", "new_password": "a-new-password-1"})
    assert r.status_code == 422 and r.json()["code"] == "password_managed_by_idp", r.text
    assert r.json()["message"] == ("alice signs in with the LDAP directory: the password is "
                                   "changed there, not in gpuslice")
    users = {u["username"]: u for u in (await admin.get("/api/v1/users")).json()}
    r = await admin.patch(f"/api/v1/users/{users['alice']['id']}",
                          json={"password": "a-new-password-1"})
    assert r.status_code == 422 and r.json()["code"] == "password_managed_by_idp", r.text
    # a personal project follows its user: no group is linked to it
    r = await admin.put("/api/v1/projects/~alice/idp-groups",
                        json={"provider": "ldap", "groups": ["vision"]})
    assert r.status_code == 422 and r.json()["code"] == "personal_project", r.text


def test_ldap3_is_loaded_only_where_a_directory_is_configured(tmp_path: Path) -> None:
    """The CLI's start and a manager without auth.ldap never import ldap3 (§4.1)."""
    code = ("import sys\n"
            "import gpuslice.cli.main, gpuslice.cli.admin\n"
            "from gpuslice.manager.app import create_app\n"
            "from gpuslice.manager.settings import load_settings\n"
            f"create_app(load_settings(data_dir={str(tmp_path)!r}))\n"
            "print('ldap3' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_the_directory_is_reached_over_tls_with_its_ca_only(
        tmp_path: Path, ldap_directory: SlapdDirectory) -> None:
    """ldaps:// and StartTLS check the directory's certificate with ca_file; another CA is
    refused in one line (the directory "did not answer" gpuslice's terms)."""
    def directory(**more: Any) -> Directory:
        config = ldap_settings(ldap_directory, **more)
        return Directory(load_settings(data_dir=tmp_path, auth={"ldap": config}).auth.ldap)

    for tls in ({"url": ldap_directory.ldaps_url}, {"start_tls": True}):
        found = directory(ca_file=str(ldap_directory.ca_file), **tls).find_user("alice")
        assert found is not None and found.subject == ldap_directory.entry_uuid("alice")
        other_ca = tmp_path / "other-ca.pem"
        other_ca.write_bytes(make_ca("another CA")[1].public_bytes(Encoding.PEM))
        with pytest.raises(DirectoryDown) as refused:
            directory(ca_file=str(other_ca), **tls).find_user("alice")
        assert refused.value.message.endswith("local accounts can still sign in")
    with pytest.raises(ValueError, match="passwords would cross the network in clear"):
        load_settings(data_dir=tmp_path, auth={"ldap": ldap_settings(
            ldap_directory, url="ldap://ldap.lab.test")})
    # the throttle stops a flood through gpuslice before the directory locks the account
    with pytest.raises(ValueError, match=r"login_failures_per_user \(10\) must stay below "
                                         r"auth.ldap.lockout_threshold \(5\)"):
        load_settings(data_dir=tmp_path, auth={"ldap": ldap_settings(
            ldap_directory, lockout_threshold=5)})
