"""`gpuslice admin recover` (issue 42, identity.md §6.6): on the manager host, against the
database the running manager uses (SQLite, or PostgreSQL where GPUSLICE_TEST_PG names one), it
makes the local first admin an active admin again with a new password in admin-credentials
(0600), ends its tokens and leaves an audit row; the manager's login takes the new password."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.models import UserRow
from gpuslice.manager.services.breakglass import recover
from gpuslice.manager.services.users import CREDENTIALS_FILE
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows, seal
from tests.manager.conftest import Client, UserFactory, client_for, login
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


async def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    # in a thread: the manager using the same database runs on this test's event loop
    return await asyncio.to_thread(
        subprocess.run, [GPUSLICE, *args], capture_output=True, text=True,
        env=env | {"HOME": str(home)}, timeout=scaled(60), check=False)


def _credentials(settings: ManagerSettings) -> dict[str, str]:
    path = settings.data_dir / CREDENTIALS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return dict(line.split(": ", 1) for line in path.read_text().splitlines())


def _config(settings: ManagerSettings, tmp_path: Path) -> Path:
    """The manager's settings file, as its host has it."""
    path = tmp_path / "manager.toml"
    path.write_text(f"data_dir = {json.dumps(str(settings.data_dir))}\n\n[database]\n"
                    f"url = {json.dumps(settings.database_url)}\n")
    return path


async def test_recover_gives_the_locked_out_admin_back_while_the_manager_runs(
    app: FastAPI, admin: Client, anon: Client, make_user: UserFactory,
    settings: ManagerSettings, tmp_path: Path,
) -> None:
    old_password = _credentials(settings)["password"]
    boss = await make_user("boss", role="admin")
    users = {u["username"]: u["id"] for u in (await admin.get("/api/v1/users")).json()}
    r = await boss.patch(f"/api/v1/users/{users['admin']}", json={
        "role": "user", "is_active": False, "password": "forgotten-pw"})
    assert r.status_code == 200, r.text  # the first admin: demoted, disabled, password lost
    assert (await admin.get("/api/v1/auth/me")).status_code == 401

    done = await cli(tmp_path, "admin", "recover", "--config",
                     str(_config(settings, tmp_path)), "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("admin admin reset: an active admin, ")
    creds = _credentials(settings)
    assert creds["username"] == "admin" and creds["password"] != old_password
    token = await login(anon, "admin", creds["password"])
    async with client_for(app, token) as back:
        me = (await back.get("/api/v1/auth/me")).json()
        assert (me["role"], me["is_active"]) == ("admin", True)
        await seal(app)
        assert (await back.get("/api/v1/audit/verify")).json()["intact"] is True
    [row] = await rows(app, action="admin.recover")
    assert row.actor_id.startswith("host:") and row.actor_id in done.stdout
    assert (row.actor_type, row.outcome, row.target_id) == ("system", "success", users["admin"])
    assert json.loads(row.details)["before"] == {"role": "user", "is_active": False}


async def test_recover_makes_the_admin_anew_when_it_is_gone(
    app: FastAPI, anon: Client, settings: ManagerSettings
) -> None:
    async with app.state.sessionmaker() as db:
        await db.execute(update(UserRow).where(UserRow.username == "admin")
                         .values(username="renamed"))
        await db.commit()
    done = await recover(settings.database_url, "admin", settings.data_dir)
    assert done.created and done.credentials == settings.data_dir / CREDENTIALS_FILE
    token = await login(anon, "admin", _credentials(settings)["password"])
    async with client_for(app, token) as back:
        assert (await back.get("/api/v1/auth/me")).json()["role"] == "admin"


async def test_recover_without_a_database_says_so_in_one_line(tmp_path: Path) -> None:
    done = await cli(tmp_path, "admin", "recover", "--data-dir", str(tmp_path / "empty"),
                     "--yes")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: no database at {tmp_path / 'empty' / 'gpuslice.db'}")
    assert not (tmp_path / "empty" / CREDENTIALS_FILE).exists()
