"""`gpuslice admin backup / restore` of the whole platform against a real `manager serve`
(SQLite): files, models and credentials come back byte for byte; a live database is refused;
damage is one line; /metrics says when the last backup succeeded."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gpuslice.client import Client
from tests.ports import free_port
from tests.waits import scaled

from .conftest import GPUSLICE, IMAGE, Manager, _password, _wait_ready

METRIC = "gpuslice_backup_last_success_timestamp_seconds"
# what is the database's or a lock's, not a file the platform keeps
NOT_FILES = {"gpuslice.db", "gpuslice.db-wal", "gpuslice.db-shm", "gpuslice.db.in-use"}


def _admin(manager: Manager, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = manager.env | {"GPUSLICE_SESSIONS__ALLOWED_IMAGES": json.dumps([IMAGE])}
    return subprocess.run([GPUSLICE, "admin", *args, "--data-dir", str(data)], env=env,
                          capture_output=True, text=True, timeout=scaled(120), check=False)


def _hashes(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its SHA-256 and mode (the database and locks aside)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in NOT_FILES:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = (digest, path.stat().st_mode & 0o7777)
    return found


@contextmanager
def _serve(manager: Manager, data: Path) -> Iterator[str]:
    """`gpuslice manager serve` on ``data``, until the block ends: its URL."""
    port = free_port()
    log = (data.parent / f"serve-{port}.log").open("wb")
    env = {k: v for k, v in manager.env.items() if not k.startswith("GPUSLICE_")}
    process = subprocess.Popen(
        [GPUSLICE, "manager", "serve", "--port", str(port)], stdout=log, stderr=log,
        env=env | {"GPUSLICE_DATA_DIR": str(data),
                   "GPUSLICE_SESSIONS__ALLOWED_IMAGES": json.dumps([IMAGE])})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, data / "admin-credentials", process)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def test_files_models_and_credentials_come_back_byte_for_byte(manager: Manager,
                                                               tmp_path: Path) -> None:
    data, fresh = tmp_path / "data", tmp_path / "fresh"
    (tmp_path / "in.bin").write_bytes(os.urandom(3 * 1024**2 + 17))  # more than one chunk
    (tmp_path / "weights.bin").write_bytes(os.urandom(200_000))
    assert manager.cli("folder", "create", "datasets").returncode == 0
    done = manager.cli("folder", "upload", "datasets", str(tmp_path / "in.bin"), "--to", "raw")
    assert done.returncode == 0, done.stderr
    done = manager.cli("model", "upload", str(tmp_path / "weights.bin"), "--name", "r1")
    assert done.returncode == 0, done.stderr
    before = _hashes(data)
    assert "admin-credentials" in before and "models/.signing-key" in before

    backed = _admin(manager, data, "backup", str(tmp_path / "all.gsbackup"))
    assert backed.returncode == 0, backed.stderr
    assert "files: data" in backed.stdout and "storage" in backed.stdout
    assert f"note: made the backup key {data / 'backup-key'} (mode 0600)" in backed.stdout
    checked = _admin(manager, fresh, "restore", str(tmp_path / "all.gsbackup"), "--check",
                     "--key", str(data / "backup-key"))
    assert checked.returncode == 0, checked.stderr
    assert "its MAC matching backup key" in checked.stdout
    # elsewhere, the key of the platform that made it is needed: said in one line
    keyless = _admin(manager, fresh, "restore", str(tmp_path / "all.gsbackup"))
    assert keyless.returncode == 1 and not fresh.exists()
    assert keyless.stderr.strip() == (
        f"error: there is no backup key at {fresh / 'backup-key'}: give the key of the platform "
        "that made the backup with --key FILE (the file backup-key in its data directory), or "
        f"copy that file to {fresh / 'backup-key'}; if that key is lost, --trust-unsigned "
        "restores without checking the backup's MAC (only for a backup kept where no one else "
        "could write)")
    restored = _admin(manager, fresh, "restore", str(tmp_path / "all.gsbackup"),
                      "--key", str(data / "backup-key"))
    assert restored.returncode == 0, restored.stderr
    kept_key = _hashes(fresh).pop("backup-key")  # the restored platform goes on with its key
    assert kept_key == _hashes(data)["backup-key"] and kept_key[1] == 0o600
    assert {k: v for k, v in _hashes(fresh).items() if k != "backup-key"} == before
    assert not list(fresh.rglob("*.restoring*"))  # no staging left behind

    with _serve(manager, fresh) as url, Client(url) as admin:
        # the same admin login, the same folder file, the same model file
        admin.login("admin", _password(data / "admin-credentials"))
        env = manager.env | {"GPUSLICE_URL": url,
                             "GPUSLICE_TOKEN": admin.create_token("after").token}
        cli = [GPUSLICE]
        got = subprocess.run([*cli, "model", "download", "r1", "--to", str(tmp_path / "m")],
                             env=env, capture_output=True, text=True, timeout=scaled(60))
        assert got.returncode == 0, got.stderr
        assert (tmp_path / "m" / "weights.bin").read_bytes() == \
            (tmp_path / "weights.bin").read_bytes()
        got = subprocess.run([*cli, "folder", "download", "datasets", "raw/in.bin", "--to",
                              str(tmp_path / "out.bin")], env=env, capture_output=True,
                             text=True, timeout=scaled(60))
        assert got.returncode == 0, got.stderr
        assert (tmp_path / "out.bin").read_bytes() == (tmp_path / "in.bin").read_bytes()


def test_a_restore_into_the_running_managers_database_is_refused(manager: Manager,
                                                                 tmp_path: Path) -> None:
    data = tmp_path / "data"
    file = tmp_path / "live.gsbackup"
    assert _admin(manager, data, "backup", str(file)).returncode == 0
    for extra in ((), ("--database-only",)):
        refused = _admin(manager, data, "restore", str(file), "--force", *extra)
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr.strip() == (
            f"error: {data / 'gpuslice.db'} is in use by a running manager (`gpuslice up` or "
            "`gpuslice manager serve`): stop it, then restore")
    # the running manager did not notice: its admin's token and sessions are there
    listed = manager.cli("session", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["items"]) == 3


@pytest.mark.parametrize("pages", [(4, 8), (1, None)], ids=["some pages", "all but the first"])
def test_a_backup_of_a_damaged_database_is_one_line(manager: Manager, tmp_path: Path,
                                                     pages: tuple[int, int | None]) -> None:
    damaged = tmp_path / "damaged.db"
    with sqlite3.connect(tmp_path / "data" / "gpuslice.db") as live, \
            sqlite3.connect(damaged) as copy:
        live.backup(copy)
    size = damaged.stat().st_size
    first, last = pages[0] * 4096, (pages[1] * 4096 if pages[1] else size)
    with damaged.open("r+b") as raw:  # pages overwritten, the first (the schema) kept
        raw.seek(first)
        raw.write(b"\xa5" * (last - first))
    file = tmp_path / "out.gsbackup"
    done = _admin(manager, tmp_path / "data", "backup", str(file), "--database-url",
                  f"sqlite+aiosqlite:///{damaged}", "--database-only")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"error: {damaged} is damaged (")
    assert "restore the last good backup" in done.stderr
    assert not file.exists()


def test_metrics_say_when_the_last_backup_succeeded(manager: Manager, tmp_path: Path) -> None:
    def scrape() -> str:
        answer = httpx.get(f"{manager.url}/metrics", timeout=scaled(10),
                           headers={"Authorization": f"Bearer {manager.env['GPUSLICE_TOKEN']}"})
        assert answer.status_code == 200, answer.text
        return answer.text

    assert METRIC not in scrape()  # never backed up: unknown, not 0
    started = time.time()
    assert _admin(manager, tmp_path / "data", "backup", str(tmp_path / "b")).returncode == 0
    [sample] = [line for line in scrape().splitlines() if line.startswith(METRIC + " ")]
    assert started - 1 <= float(sample.split()[1]) <= time.time()


def test_a_file_changed_in_a_backup_is_refused_and_nothing_is_written(
    manager: Manager, tmp_path: Path
) -> None:
    (tmp_path / "w.bin").write_bytes(b"model weights " * 1000)
    assert manager.cli("model", "upload", str(tmp_path / "w.bin"), "--name", "w").returncode == 0
    file = tmp_path / "all.gsbackup"
    assert _admin(manager, tmp_path / "data", "backup", str(file)).returncode == 0
    lines = gzip.decompress(file.read_bytes()).decode().splitlines(keepends=True)
    # the model's content, changed but still valid base64: only its SHA-256 can tell
    at = next(i for i, line in enumerate(lines) if '"path":"' in line and "w.bin" in line) + 1
    changed = bytes(b ^ 1 for b in base64.b64decode(json.loads(lines[at])))
    lines[at] = json.dumps(base64.b64encode(changed).decode()) + "\n"
    bad = tmp_path / "bad.gsbackup"
    bad.write_bytes(gzip.compress("".join(lines).encode()))
    changed = "has been changed since it was written (its MAC does not match"
    checked = _admin(manager, tmp_path / "data", "restore", str(bad), "--check")
    assert checked.returncode == 1 and changed in checked.stderr
    fresh = tmp_path / "fresh"
    done = _admin(manager, fresh, "restore", str(bad), "--key",
                  str(tmp_path / "data" / "backup-key"))
    assert done.returncode == 1
    assert changed in done.stderr and "Traceback" not in done.stderr
    # nothing restored, nothing staged
    assert not (fresh / "gpuslice.db").exists() and not (fresh / "admin-credentials").exists()
    assert not [p for p in fresh.rglob("*") if p.name not in NOT_FILES]


def test_a_model_store_on_s3_is_named_and_left_out(manager: Manager, tmp_path: Path) -> None:
    file = tmp_path / "s3.gsbackup"
    env = manager.env | {"GPUSLICE_MODEL_STORE__BACKEND": "s3",
                         "GPUSLICE_MODEL_STORE__S3_BUCKET": "lab-models"}
    done = subprocess.run([GPUSLICE, "admin", "backup", str(file), "--data-dir",
                           str(tmp_path / "data")], env=env, capture_output=True, text=True,
                          timeout=scaled(120), check=False)
    assert done.returncode == 0, done.stderr
    assert ("note: the model store is S3 bucket lab-models (prefix none): not in this backup "
            "(back the bucket up with its own tools)") in done.stdout.splitlines()
    [header] = [json.loads(gzip.decompress(file.read_bytes()).decode().splitlines()[0])]
    models = next(a for a in header["areas"] if a["name"] == "models")
    assert models["entries"] == 0 and models["external"].startswith("S3 bucket lab-models")
