"""`gpuslice manager serve` with a database it cannot use: it refuses to start in one line (or,
once running, answers 503 in one line and logs one), and recovers when the cause goes away.
PostgreSQL's cases are in tests/manager/test_serve_pg.py. And both `manager serve` and
`agent serve` with a data directory they cannot use."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from gpuslice.client import Client
from tests.ports import free_port
from tests.waits import scaled

from .conftest import GPUSLICE, IMAGE, _password, _wait_ready

START = "error: "


def serve(tmp_path: Path, env: dict[str, str], port: int | None = None,
          prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], int]:
    port = port or free_port()
    process = subprocess.Popen(
        [*prefix, GPUSLICE, "manager", "serve", "--port", str(port)],
        env=_env(tmp_path) | env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    return process, port


def refused(tmp_path: Path, env: dict[str, str], port: int | None = None) -> str:
    """Start the manager; it must exit non-zero with one `error:` line and no traceback."""
    process, _ = serve(tmp_path, env, port)
    out, _ = process.communicate(timeout=scaled(90))
    assert process.returncode not in (0, None), out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith(START)]
    assert len(errors) == 1, out
    return errors[0].removeprefix(START)


def test_a_postgresql_nobody_answers(tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql+asyncpg://gpuslice:secret@127.0.0.1:{port}/gpuslice"
    message = refused(tmp_path, {"GPUSLICE_DATABASE__URL": url})
    assert message.startswith(f"the database gpuslice at 127.0.0.1:{port} does not answer (")
    assert message.endswith("): start PostgreSQL, or fix database.url")
    assert "secret" not in message


def test_a_sqlite_database_another_program_holds(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    holder = sqlite3.connect(data / "gpuslice.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # a sqlite3 shell in the middle of a write
    try:
        message = refused(tmp_path, {"GPUSLICE_DATABASE__BUSY_TIMEOUT": "1"})
    finally:
        holder.close()
    assert message == (
        f"the SQLite database {data / 'gpuslice.db'} is locked by another program: stop "
        "whatever else holds it (another gpuslice manager or `gpuslice up` on this data "
        "directory, a sqlite3 shell), then try again")


def test_a_database_migrated_by_a_newer_gpuslice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "gpuslice.db") as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES ('i99_from_the_future')")
    message = refused(tmp_path, {})
    assert message.startswith(
        "the database was migrated by a newer gpuslice (schema revision i99_from_the_future, "
        "unknown to gpuslice ")
    assert message.endswith(
        "): run that newer version, or restore a backup of the database taken before the "
        f"upgrade (sqlite+aiosqlite:///{data / 'gpuslice.db'})")
    with sqlite3.connect(data / "gpuslice.db") as db:  # and it was left as it was
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("i99_from_the_future",)]


def test_a_database_behind_when_migrations_are_off(tmp_path: Path) -> None:
    message = refused(tmp_path, {"GPUSLICE_DATABASE__MIGRATE_ON_START": "false"})
    assert message.startswith("the database's schema is at revision none, this gpuslice needs ")
    assert ": start it once with database.migrate_on_start = true (sqlite+aiosqlite:///" \
        in message


def test_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        message = refused(tmp_path, {}, port)
    assert message == f"port {port} on 127.0.0.1 is in use: pick another with --port"


def test_sqlite_locked_while_running_is_a_503_then_recovers(tmp_path: Path) -> None:
    process, port = serve(tmp_path, {"GPUSLICE_DATABASE__BUSY_TIMEOUT": "1",
                                     "GPUSLICE_SESSIONS__ALLOWED_IMAGES": f'["{IMAGE}"]'})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, tmp_path / "data" / "admin-credentials", process)
        env = _cli_env(tmp_path, url)
        holder = sqlite3.connect(tmp_path / "data" / "gpuslice.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another program writing, and taking its time
        try:
            done = _cli(env, "session", "create", "--image", IMAGE, "--cpu", "0.25")
        finally:
            holder.close()
        assert done.returncode == 1
        assert done.stderr == ("error: the manager's database is locked by another program; "
                               "try again later\n")
        done = _cli(env, "session", "create", "--image", IMAGE, "--cpu", "0.25", "--json")
        assert done.returncode == 0, done.stderr
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=scaled(30))
    assert "Traceback" not in out
    assert f"POST /api/v1/sessions: the SQLite database {tmp_path / 'data' / 'gpuslice.db'} " \
           "is locked by another program" in out


def test_its_disk_full_while_running_is_a_503_then_recovers(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (a small filesystem in a mount namespace)")
    data = tmp_path / "data"
    data.mkdir()
    # The data directory on a 72 MiB filesystem only the manager sees (its own namespace).
    script = f'mount -t tmpfs -o size=72m none {data} && exec "$@"'
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh")
    process, port = serve(tmp_path, {"GPUSLICE_SESSIONS__ALLOWED_IMAGES": f'["{IMAGE}"]'},
                          prefix=prefix)
    url = f"http://127.0.0.1:{port}"
    seen = Path(f"/proc/{process.pid}/root") / str(data).lstrip("/")  # the manager's view
    try:
        _wait_ready(url, seen / "admin-credentials", process)
        env = _cli_env(tmp_path, url, seen)
        filler = seen / "filler"
        with filler.open("wb") as out:  # fill it up to the last byte
            try:
                while True:
                    out.write(b"\0" * 2**20)
                    out.flush()
            except OSError:
                pass
        done = _cli(env, "session", "create", "--image", IMAGE, "--cpu", "0.25", "--count", "5")
        assert done.returncode == 1
        assert done.stderr == ("error: the manager's database has no space left (nothing was "
                               "changed); try again later\n")
        filler.unlink()
        listed = _cli(env, "session", "list", "--json")
        assert '"total": 0' in listed.stdout  # none of the five half-made
        done = _cli(env, "session", "create", "--image", IMAGE, "--cpu", "0.25", "--count", "5")
        assert done.returncode == 0, done.stderr
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=scaled(30))
    assert "Traceback" not in out


def _cli_env(tmp_path: Path, url: str, data: Path | None = None) -> dict[str, str]:
    with Client(url) as admin:
        admin.login("admin", _password((data or tmp_path / "data") / "admin-credentials"))
        token = admin.create_token("faults").token
    return _env(tmp_path) | {"GPUSLICE_URL": url, "GPUSLICE_TOKEN": token}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUSLICE, *args], env=env, capture_output=True, text=True,
                          timeout=scaled(60), check=False)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    return env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path),
                  "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json")}


def test_health_says_which_gpuslice_answers(tmp_path: Path) -> None:
    process, port = serve(tmp_path, {})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, tmp_path / "data" / "admin-credentials", process)
        answer = httpx.get(f"{url}/api/v1/health")
        assert answer.headers["X-Gpuslice-Api"] == "1"
        assert answer.headers["X-Gpuslice-Version"]
        assert httpx.get(f"{url}/api/v1/nope").headers["X-Gpuslice-Api"] == "1"
    finally:
        process.terminate()
        process.communicate(timeout=scaled(30))


@pytest.mark.parametrize(("command", "variable", "setting"), [
    (["manager", "serve"], "GPUSLICE_DATA_DIR", "data_dir (GPUSLICE_DATA_DIR)"),
    (["agent", "serve"], "GPUSLICE_AGENT_DATA_DIR", "data_dir (GPUSLICE_AGENT_DATA_DIR)"),
])
def test_a_data_directory_inside_a_file(
    tmp_path: Path, command: list[str], variable: str, setting: str
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    done = subprocess.run([GPUSLICE, *command], env=_env(tmp_path) | {variable: str(a_file / "d")},
                          capture_output=True, text=True, timeout=scaled(60))
    assert (done.returncode, done.stdout, done.stderr) == (1, "", (
        f"error: the data directory {a_file / 'd'} is inside a file, not a directory: pick "
        f"another with {setting}\n"))
