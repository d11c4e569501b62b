"""`gpuslice manager serve` on PostgreSQL when the database fails it (a database of the test's
own; the machine's server is never stopped): refused in one line at start, 503 in one line
while it is away and back by itself after, and a manager killed in the middle of a transaction
leaves nothing half-made."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from gpuslice.client import Client
from tests.cli.conftest import _wait_ready as wait_ready
from tests.ports import free_port
from tests.waits import scaled

pytestmark = pytest.mark.pg

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
IMAGE = "tests/idle:1"


@pytest.fixture
def pg(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("needs PostgreSQL (GPUSLICE_TEST_PG)")
    return database_url


class Manager:
    def __init__(self, tmp_path: Path, url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = tmp_path / "data"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
            "GPUSLICE_DATA_DIR": str(self.data), "GPUSLICE_DATABASE__URL": url,
            "GPUSLICE_SESSIONS__ALLOWED_IMAGES": f'["{IMAGE}"]', "HOME": str(tmp_path),
            "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json"),
        }
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        self.process = subprocess.Popen(
            [GPUSLICE, "manager", "serve", "--port", str(self.port)], env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return self.process

    def wait_ready(self) -> None:
        assert self.process is not None
        wait_ready(self.url, self.data / "admin-credentials", self.process)  # type: ignore

    def admin(self) -> Client:
        text = (self.data / "admin-credentials").read_text()
        password = next(line.split(": ", 1)[1] for line in text.splitlines()
                        if line.startswith("password: "))
        client = Client(self.url)
        client.login("admin", password)
        return client

    def cli(self, token: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = self.env | {"GPUSLICE_URL": self.url, "GPUSLICE_TOKEN": token}
        return subprocess.run([GPUSLICE, *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    def output(self) -> str:
        if self.process is None:
            return ""
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.communicate(timeout=30)[0]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(30)


@pytest.fixture
def manager(tmp_path: Path, pg: str) -> Iterator[Manager]:
    made = Manager(tmp_path, pg)
    try:
        yield made
    finally:
        made.stop()


def refused(manager: Manager) -> str:
    out, _ = manager.start().communicate(timeout=90)
    assert manager.process is not None and manager.process.returncode not in (0, None), out
    assert "Traceback" not in out, out
    [line] = [line for line in out.splitlines() if line.startswith("error: ")]
    return line.removeprefix("error: ")


def test_a_database_that_does_not_exist(tmp_path: Path, pg: str) -> None:
    url = make_url(pg).set(database="gpuslice_i17_missing")
    manager = Manager(tmp_path, url.render_as_string(hide_password=False))
    assert refused(manager) == (
        f"the database gpuslice_i17_missing at {url.host}:{url.port or 5432} does not exist: "
        "create it (`createdb`), or fix the name in database.url")


def test_a_wrong_password(tmp_path: Path, pg: str) -> None:
    url = make_url(pg).set(password="not-the-password")
    manager = Manager(tmp_path, url.render_as_string(hide_password=False))
    message = refused(manager)
    assert message.startswith(f"the database {url.database} at {url.host}:{url.port or 5432} "
                              "refused the login (")
    assert message.endswith("): fix the user and password in database.url")
    assert "not-the-password" not in message


class Proxy:
    """A TCP relay to the database that the test can cut (the database "goes away": its
    connections drop, new ones are reset) and restore. The listening socket is held from
    start to close, so the port cannot be taken by another process's connection meanwhile
    (other test passes run beside this one)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self.port = self._server.getsockname()[1]
        self._cut = True
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def start(self) -> None:
        with self._lock:
            self._cut = False

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for conn in self._open:
                conn.close()
            self._open.clear()

    def close(self) -> None:
        self.cut()
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = None if self._cut else socket.create_connection(self.target)
            with self._lock:
                if self._cut or upstream is None:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
                    client.close()
                    if upstream is not None:
                        upstream.close()
                    continue
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        return
                    (b if src is a else a).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            a.close()
            b.close()


def test_the_database_away_while_running_is_a_503_then_recovers(
    tmp_path: Path, pg: str
) -> None:
    url = make_url(pg)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    manager = Manager(tmp_path, url.set(host="127.0.0.1", port=proxy.port)
                      .render_as_string(hide_password=False))
    manager.start()
    try:
        manager.wait_ready()
        with manager.admin() as admin:
            token = admin.create_token("faults").token
        assert manager.cli(token, "session", "list").returncode == 0
        proxy.cut()
        done = manager.cli(token, "session", "list")
        assert (done.returncode, done.stderr) == (
            1, "error: the manager's database does not answer; try again later\n")
        proxy.start()
        done = manager.cli(token, "session", "create", "--image", IMAGE, "--cpu", "0.25")
        assert done.returncode == 0, done.stderr
    finally:
        proxy.close()
        out = manager.output()
    assert "Traceback" not in out


async def test_killed_in_the_middle_of_a_create_of_ten_leaves_none(
    manager: Manager, pg: str
) -> None:
    manager.start()
    await asyncio.to_thread(manager.wait_ready)
    admin = await asyncio.to_thread(manager.admin)
    token = (await asyncio.to_thread(admin.create_token, "faults")).token
    raw = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    holder = await asyncpg.connect(raw)
    try:
        # The create inserts its ten sessions (one request's most), then waits on this lock to
        # write their history: killed there, it is mid-transaction with its rows written, not
        # committed.
        tx = holder.transaction()
        await tx.start()
        await holder.execute("LOCK TABLE status_history IN EXCLUSIVE MODE")
        create = subprocess.Popen(
            [GPUSLICE, "session", "create", "--image", IMAGE, "--cpu", "0.25", "--count", "10",
             "--name", "burst"],
            env=manager.env | {"GPUSLICE_URL": manager.url, "GPUSLICE_TOKEN": token},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        await _wait_blocked(holder)
        # Mid-transaction: it holds the lock of its inserts into sessions, its history waits.
        assert await holder.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE "
            "c.relname = 'sessions' AND l.mode = 'RowExclusiveLock' AND l.granted AND "
            "l.pid <> pg_backend_pid()") == 1
        manager.stop(signal.SIGKILL)
        await tx.rollback()
    finally:
        await holder.close()
    out, err = await asyncio.to_thread(create.communicate, timeout=30)
    assert create.returncode == 1 and "Traceback" not in out + err
    assert "(the sessions exist if it lists them, all or none)" in err
    manager.start()
    await asyncio.to_thread(manager.wait_ready)
    done = await asyncio.to_thread(manager.cli, token, "session", "list", "--json", "--all")
    assert '"total": 0' in done.stdout, done.stdout + done.stderr
    check = await asyncpg.connect(raw)
    try:  # nothing of it anywhere: no session row, no history row
        assert await check.fetchval("SELECT count(*) FROM sessions") == 0
        assert await check.fetchval("SELECT count(*) FROM status_history") == 0
    finally:
        await check.close()
    admin.close()


async def _wait_blocked(conn: asyncpg.Connection, timeout: float = 30) -> None:
    """Until another connection to the database waits for our lock (its statement text may
    still be the previous one's: it waits while the statement is prepared)."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'")
        if waiting:
            return
        if time.monotonic() > deadline:
            rows = await conn.fetch("SELECT state, wait_event_type, wait_event, query FROM "
                                    "pg_stat_activity WHERE datname = current_database()")
            raise AssertionError(f"the create never reached the locked table: {rows}")
        await asyncio.sleep(0.05)
