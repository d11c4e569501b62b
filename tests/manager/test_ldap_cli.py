"""The CLI with an LDAP directory (issue 42): alice logs in with her directory password, an
admin links a project to a directory group, tests the directory, lists users with their
source; a directory user's password is not gpuslice's to change."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from gpuslice.manager.loop_table import run_once
from gpuslice.manager.settings import ManagerSettings
from tests.idp.ldap import Directory as SlapdDirectory
from tests.manager.conftest import Client
from tests.manager.ldap_helpers import manager_settings

pytestmark = pytest.mark.loops_off("ldap_recheck")
Cli = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str,
             ldap_directory: SlapdDirectory) -> ManagerSettings:
    return manager_settings(tmp_path, migrated_database_url, ldap_directory)


def cli_for(base_url: str, home: Path, token: str | None = None) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GPUSLICE_URL": base_url,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if token:
        env["GPUSLICE_TOKEN"] = token

    async def cli(*args: str, stdin: str = "") -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuslice.cli.main", *args, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
        return process.returncode or 0, out.decode(), err.decode()

    return cli


async def test_admin_and_alice_from_the_cli(
        app: FastAPI, base_url: str, admin: Client, tmp_path: Path,
        settings: ManagerSettings, ldap_directory: SlapdDirectory) -> None:
    token = admin.headers["Authorization"].split()[1]
    run = cli_for(base_url, tmp_path / "admin", token)
    assert (await run("admin", "project", "create", "vision"))[0] == 0
    rc, out, err = await run("admin", "project", "link-group", "vision", "vision")
    assert rc == 0 and out.strip() == "idp_groups: ldap: vision", err
    rc, out, err = await run("admin", "project", "show", "vision")
    assert rc == 0 and "idp_groups: ldap: vision" in out, err
    rc, out, err = await run("admin", "ldap", "test", "--user", "alice")
    assert rc == 0, err
    assert f"subject: {ldap_directory.entry_uuid('alice')}" in out
    assert "may sign in: yes" in out and "projects: vision" in out, out
    rc, out, err = await run("admin", "ldap", "test", "--user", "nobody")
    assert rc == 1 and "no entry" in out, (out, err)

    alice = cli_for(base_url, tmp_path / "alice")
    rc, out, err = await alice("login", base_url, "--username", "alice", "--password-stdin",
                               stdin="alice-password\n")
    assert rc == 0 and "as alice (user)" in out, err
    rc, out, err = await alice("password", "--stdin", stdin="alice-password\nnew-one-123\n")
    assert rc != 0 and len(err.strip().splitlines()) == 1, (out, err)
    assert "signs in with the LDAP directory" in err and "Traceback" not in err
    rc, out, err = await run("admin", "user", "list", "--json")
    listed = {u["name"]: u for u in json.loads(out)}
    assert listed["alice"]["source"] == "ldap" and listed["admin"]["source"] == "local"
    rc, out, _ = await run("admin", "project", "show", "vision", "--json")
    assert json.loads(out)["members"] == ["alice"]

    # locked at the directory: the CLI's token (an API token) stops at the next re-check
    ldap_directory.lock("alice")
    await run_once(app, "ldap_recheck")
    rc, out, err = await alice("session", "list")
    assert rc != 0 and "revoked" in err, (out, err)
    rc, out, err = await alice("login", base_url, "--username", "alice", "--password-stdin",
                               stdin="alice-password\n")
    assert rc != 0 and "your directory account is locked" in err, (out, err)
    rc, out, _ = await run("admin", "user", "list")
    assert "disabled (directory: disabled)" in out and "ldap" in out, out

    rc, out, err = await run("admin", "project", "unlink-group", "vision", "vision")
    assert rc == 0 and out.strip() == "idp_groups: -", err
    rc, out, err = await run("admin", "project", "unlink-group", "vision", "vision")
    assert rc == 1 and "is not linked to project vision" in err, err
