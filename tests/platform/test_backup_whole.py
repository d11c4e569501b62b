"""A whole platform backed up while busy and restored on a fresh data directory: the same
sessions, files, models and logins, byte for byte; the same rows on SQLite and PostgreSQL.

A `gpuslice up` with a finished run (its code in `runs/t1/`, its model), a folder with a file,
a second user with a policy and an API token, a RUNNING session holding the whole GPU and one
PENDING behind it is backed up with `admin backup FILE --data-dir D` while it runs, then
stopped. The backup is restored into a fresh data directory D2 (SQLite) and, when
GPUSLICE_TEST_PG is set, into a PostgreSQL database with a data directory D3. Every file of D
(credentials, agent state, storage, models with the signing key) has its hash in D2; every row
of D2 equals PostgreSQL's; `up` on D2 shows what D showed, takes the same admin password and
the second user's token, and downloads the same model and folder bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create_pg_database, drop_pg_database, pg_url
from tests.manager.db_contents import contents
from tests.waits import scaled

from .conftest import GPUSLICE, Platform, new_platform

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
TRAIN = """\
import os
os.makedirs("output", exist_ok=True)
with open("output/weights.bin", "wb") as f:
    f.write(bytes(range(256)) * 4096)
print("training done")
"""
# the database and the locks are not files a restore copies (the database is restored by rows)
NOT_FILES = {"gpuslice.db", "gpuslice.db-wal", "gpuslice.db-shm", "gpuslice.db.in-use",
             "up.lock", "agent.lock"}


def test_a_busy_platform_comes_back_whole(platform: Platform, platforms: list[Platform],
                                          base_image: str, tmp_path: Path) -> None:
    carol = _busy(platform, base_image, tmp_path)
    before = _visible(platform, carol, tmp_path)
    file = tmp_path / "whole.gsbackup"
    done = platform.cli("admin", "backup", str(file), "--data-dir", str(platform.data_dir))
    assert done.returncode == 0, done.stderr
    assert "files: data" in done.stdout and "storage" in done.stdout and "models" in done.stdout
    # into the live database of the running `up`: refused (its agent would stop every session)
    live = platform.cli("admin", "restore", str(file), "--data-dir", str(platform.data_dir),
                        "--force")
    assert live.returncode == 1 and "is in use by a running manager" in live.stderr
    assert platform.wait_status("holding", {"RUNNING"})["status"] == "RUNNING"
    platform.processes.pop().stop()  # its session containers stay, for the restored platform

    fresh = new_platform(tmp_path / "restored")
    fresh.node = platform.node  # the same node, as on a machine rebuilt from the backup
    platforms.append(fresh)
    toml = tmp_path / "restored.toml"
    done = fresh.cli("admin", "restore", str(file), "--data-dir", str(fresh.data_dir),
                     "--settings-to", str(toml), "--key", str(platform.data_dir / "backup-key"))
    assert done.returncode == 0, done.stderr
    kept = _hashes(platform.data_dir)
    assert {"admin-credentials", "models/.signing-key", "up-options.json"} <= set(kept)
    # the run's code (runs/t1/ of its folder), a folder's file, the run's model
    assert [k for k in kept if k.startswith("storage/") and k.endswith("/t1/train.py")]
    assert [k for k in kept if k.startswith("storage/") and k.endswith("raw/sample.bin")]
    assert [k for k in kept if k.startswith("models/") and k.endswith("weights.bin")]
    assert _hashes(fresh.data_dir) == kept  # every file, byte for byte, with its mode
    assert tomllib.loads(toml.read_text())["nodes"]["fgpu_per_gpu"] == "2"  # up's own setting
    sqlite_rows = asyncio.run(contents(f"sqlite+aiosqlite:///{fresh.data_dir / 'gpuslice.db'}"))
    assert sqlite_rows["models"] and sqlite_rows["runs"] and sqlite_rows["folders"]

    fresh.start_up()
    fresh.ok("login", fresh.url, "--username", "admin", "--password-stdin",
             stdin=platform.admin_password() + "\n")  # the same admin password
    assert _visible(fresh, carol, tmp_path) == before

    server = pg_url()
    if server is not None:  # the same backup into PostgreSQL: the very same rows
        _into_postgres(server, file, fresh, tmp_path / "pg-data", sqlite_rows,
                   platform.data_dir / "backup-key")


def _busy(plat: Platform, image: str, tmp_path: Path) -> dict[str, str]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    run = subprocess.run([GPUSLICE, "run", "train.py", "--gpu", "0.5", "--name", "t1", *SMALL],
                         cwd=project, env=plat.env, text=True, capture_output=True,
                         timeout=scaled(180))
    assert run.returncode == 0, run.stderr + run.stdout
    (tmp_path / "sample.bin").write_bytes(os.urandom(1024**2 + 3))
    plat.ok("folder", "create", "datasets")
    plat.ok("folder", "upload", "datasets", str(tmp_path / "sample.bin"), "--to", "raw")
    created = json.loads(plat.ok("admin", "user", "create", "carol", "--json"))
    plat.ok("admin", "policy", "set", "carol", "--max-sessions", "3")
    env = plat.env | {"GPUSLICE_CLIENT_CONFIG": str(tmp_path / "carol.json")}
    done = plat.cli("login", plat.url, "--username", "carol", "--password-stdin",
                    stdin=created["password"] + "\n", env_extra=env)
    assert done.returncode == 0, done.stderr
    token = json.loads(plat.cli("token", "create", "ci", "--json",
                                env_extra=env).stdout)["token"]
    plat.session("holding", image, "--gpu", "2", *SMALL)  # the whole GPU
    plat.ok("session", "create", "--name", "waiting", "--image", image, "--gpu", "1", *SMALL)
    plat.wait_status("waiting", {"PENDING"})
    return {"token": token}


def _visible(plat: Platform, carol: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """What users see: sessions, users, runs, models and their bytes, a folder's file, and
    that carol's API token still answers as her."""
    sessions = json.loads(plat.ok("session", "list", "--json", "--all", "--all-pages"))
    where = tmp_path / f"seen-{plat.port}"
    plat.ok("model", "download", "t1", "--to", str(where / "model"))
    plat.ok("folder", "download", "datasets", "raw/sample.bin", "--to", str(where / "s.bin"))
    who = httpx.get(f"{plat.url}/api/v1/auth/me", timeout=scaled(10),
                    headers={"Authorization": f"Bearer {carol['token']}"})
    return {
        "sessions": sorted((s["id"], s["name"], s["status"]) for s in sessions["items"]),
        "users": sorted(u["username"] for u in json.loads(plat.ok("admin", "user", "list",
                                                                  "--json"))),
        "models": [m["name"] for m in json.loads(plat.ok("model", "list", "--json"))],
        "runs": [(r["name"], r["result"]) for r in json.loads(plat.ok("run", "list", "--json"))],
        "files": _hashes(where),
        "carol": (who.status_code, who.json().get("username")),
    }


def _hashes(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root`` (the database and locks aside): its SHA-256 and mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name not in NOT_FILES:
            found[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode & 0o7777)
    return found


def _into_postgres(server: str, file: Path, plat: Platform, data: Path,
                   sqlite_rows: dict[str, Any], key: Path) -> None:
    url = asyncio.run(create_pg_database(server, f"gpuslice_test_whole_{os.getpid()}"))
    try:
        done = plat.cli("admin", "restore", str(file), "--data-dir", str(data), "--quiet",
                        "--key", str(key), env_extra={"GPUSLICE_DATABASE__URL": url})
        assert done.returncode == 0, done.stderr
        assert asyncio.run(contents(url)) == sqlite_rows
        assert (data / "models" / ".signing-key").read_bytes() == \
            (plat.data_dir / "models" / ".signing-key").read_bytes()
    finally:
        asyncio.run(drop_pg_database(server, url))
