"""`gpuslice login`, `logout`, `auth status` and `login --with-token` as a user runs them
(issue 42): a real CLI process against the manager on a real port, its own home."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import Client, UserFactory, client_for
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
IDLE, MAX = 3600, 7 * 86400


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    auth = settings.auth.model_copy(update={"cli_token_idle": IDLE, "cli_token_max": MAX})
    return settings.model_copy(update={"auth": auth})


async def cli(home: Path, *args: str, stdin: str = "",
              **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    # in a thread: the manager answering it runs on this test's event loop
    return await asyncio.to_thread(
        subprocess.run, [GPUSLICE, *args], input=stdin, capture_output=True, text=True,
        env=base | {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")} | env,
        timeout=scaled(60), check=False)


def _stored(home: Path) -> dict[str, str | None]:
    path = home / ".config" / "gpuslice" / "client.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return dict(json.loads(path.read_text()))


async def test_login_status_and_logout(
    app: FastAPI, base_url: str, make_user: UserFactory, tmp_path: Path
) -> None:
    await make_user("alice")
    done = await cli(tmp_path, "login", base_url, "--username", "alice", "--password-stdin",
                     stdin="password-alice\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"logged in to {base_url} as alice (user) with a token of "
                                  "kind cli")
    token = _stored(tmp_path)["token"]
    assert token

    status = await cli(tmp_path, "auth", "status")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[:2] == [f"URL:     {base_url}", "user:    alice (user)"]
    assert lines[2].startswith("token:   cli token 'cli@")
    assert lines[3].startswith("expires: after 60 minutes unused: ") and \
        "; at the latest " in lines[3] and "(in 6 days)" in lines[3], lines[3]
    shown = json.loads((await cli(tmp_path, "auth", "status", "--json")).stdout)
    assert (shown["url"], shown["username"], shown["role"]) == (base_url, "alice", "user")
    assert (shown["token"]["kind"], shown["token"]["idle_seconds"]) == ("cli", IDLE)

    out = await cli(tmp_path, "logout")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"logged out of {base_url}: the token is revoked")
    assert _stored(tmp_path) == {"url": base_url, "token": None}
    async with client_for(app, token) as old:
        r = await old.get("/api/v1/auth/me")
    assert r.status_code == 401
    again = await cli(tmp_path, "logout")
    assert again.returncode == 1 and again.stderr.startswith("error: you are not logged in")
    stale = await cli(tmp_path, "session", "list", GPUSLICE_TOKEN=str(token))
    assert stale.returncode == 1
    assert stale.stderr == ("error: this token is unknown or was revoked: log in again with "
                            f"`gpuslice login {base_url}`\n")


async def test_an_expired_cli_login_says_in_one_line_to_log_in_again(
    app: FastAPI, base_url: str, make_user: UserFactory, tmp_path: Path
) -> None:
    await make_user("alice")
    done = await cli(tmp_path, "login", base_url, "--username", "alice", "--password-stdin",
                     stdin="password-alice\n")
    assert done.returncode == 0, done.stderr
    async with app.state.sessionmaker() as db:
        an_hour_ago = utcnow() - timedelta(seconds=IDLE + 1)
        await db.execute(update(ApiTokenRow).where(ApiTokenRow.kind == "cli")
                         .values(created_at=an_hour_ago, last_used_at=an_hour_ago))
        await db.commit()
    for args in (("session", "list"), ("auth", "status")):
        r = await cli(tmp_path, *args)
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == ("error: this token has expired: log in again with gpuslice login "
                            f"{base_url}\n")


async def test_login_with_token_keeps_a_token_from_stdin(
    admin: Client, base_url: str, tmp_path: Path
) -> None:
    r = await admin.post("/api/v1/auth/tokens", json={"name": "ci", "expires_in_days": 1})
    token = r.json()["token"]
    done = await cli(tmp_path, "login", base_url, "--with-token", stdin=f"{token}\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"logged in to {base_url} as admin (admin) with a token of "
                                  "kind api")
    assert _stored(tmp_path) == {"url": base_url, "token": token}
    status = await cli(tmp_path, "auth", "status")
    assert "api token 'ci'" in status.stdout and "at the latest" in status.stdout

    bad = await cli(tmp_path / "other", "login", base_url, "--with-token",
                    stdin="gsu_not-a-token\n")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: this token is unknown or was revoked")
    assert not (tmp_path / "other" / ".config" / "gpuslice" / "client.json").exists()
    empty = await cli(tmp_path / "other", "login", base_url, "--with-token", stdin="")
    assert empty.returncode == 2 and "stdin held no token" in empty.stderr
