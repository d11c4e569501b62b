"""What the CLI and the SDK say when the manager is away, the login is gone or stale, or the
manager is another version: one line naming the problem and what to do, never a traceback
nor a schema error."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gpuslice import __version__
from gpuslice.client import ApiError, Client
from tests.ports import free_port
from tests.waits import scaled

from .conftest import GPUSLICE, Manager, _password, _wait_ready

PACKAGE = Path(__file__).resolve().parents[2] / "gpuslice"


def one_line(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert done.returncode == code, done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0].removeprefix("error: ")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUSLICE, *args], env=env, capture_output=True, text=True,
                          timeout=scaled(60), check=False)


def test_no_manager_answers(manager: Manager) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    message = one_line(cli(manager.env | {"GPUSLICE_URL": url}, "session", "list"))
    assert message == (f"cannot reach the manager at {url} (Connection refused): is it "
                       "running? (`gpuslice up` runs one here; `gpuslice login URL` uses "
                       "another)")


def test_logged_out(manager: Manager) -> None:
    env = {k: v for k, v in manager.env.items() if k not in ("GPUSLICE_URL", "GPUSLICE_TOKEN")}
    message = one_line(cli(env, "session", "list"))
    assert message == "not logged in: run `gpuslice login URL` or set GPUSLICE_URL"


def test_a_revoked_or_unknown_token(manager: Manager) -> None:
    env = manager.env | {"GPUSLICE_TOKEN": "gsu_" + "x" * 43}
    assert one_line(cli(env, "session", "list")) == (
        "this token is unknown or was revoked: log in again with "
        f"`gpuslice login {manager.url}`")


def test_an_expired_token(manager: Manager, tmp_path: Path) -> None:
    with manager.client() as admin:
        created = admin.create_token("short", expires_in_days=1)
    database = tmp_path / "data" / "gpuslice.db"
    with sqlite3.connect(database) as db:  # a day later
        past = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S.%f")
        db.execute("UPDATE api_tokens SET expires_at = ? WHERE id = ?", (past, created.id))
    env = manager.env | {"GPUSLICE_TOKEN": created.token}
    assert one_line(cli(env, "session", "list", "--json")) == (
        f"this token has expired: log in again with `gpuslice login {manager.url}`")


@pytest.fixture
def newer_manager(tmp_path: Path) -> Iterator[str]:
    """A real manager of another gpuslice: this package, copied and made 0.2.0 speaking
    API revision 2, run from the copy."""
    copy = tmp_path / "newer"
    shutil.copytree(PACKAGE, copy / "gpuslice", ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "gpuslice" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{__version__}"', '"0.2.0"'))
    versions = copy / "gpuslice" / "common" / "versions.py"
    versions.write_text(versions.read_text().replace("API_REVISION = 1", "API_REVISION = 2"))
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), "HOME": str(tmp_path),
           "GPUSLICE_DATA_DIR": str(tmp_path / "newer-data")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuslice.cli.main", "manager", "serve", "--port", str(port)],
        env=env, cwd=copy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # -m: cwd first
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, tmp_path / "newer-data" / "admin-credentials", process)  # type: ignore
        yield url
    finally:
        process.terminate()
        process.wait(30)


def test_a_manager_of_another_version(newer_manager: str, manager: Manager,
                                      tmp_path: Path) -> None:
    url = newer_manager
    with httpx.Client(base_url=url) as raw:  # a login this CLI could have kept from before
        password = _password(tmp_path / "newer-data" / "admin-credentials")
        token = raw.post("/api/v1/auth/login", json={"username": "admin", "password": password})
        token = token.json()["access_token"]
    env = manager.env | {"GPUSLICE_URL": url, "GPUSLICE_TOKEN": token}
    expected = (f"the manager at {url} runs gpuslice 0.2.0 (API revision 2), this is gpuslice "
                f"{__version__} (API revision 1): upgrade gpuslice here (`pip install "
                "gpuslice==0.2.0`)")
    for args in (["session", "list"], ["session", "list", "--json"],
                 ["session", "create", "--image", "x:1"], ["node", "list"]):
        assert one_line(cli(env, *args)) == expected, args
    with Client(url, token) as client, pytest.raises(ApiError) as raised:
        client.list_sessions()
    assert (raised.value.code, raised.value.message) == ("version_mismatch", expected)


@pytest.mark.docker
def test_an_agent_and_a_manager_of_another_version(newer_manager: str, tmp_path: Path,
                                                   manager: Manager) -> None:
    from tests.dockerd import _docker_problem

    if _docker_problem():
        pytest.skip("the agent needs a Docker Engine to start")
    env = manager.env | {
        "GPUSLICE_AGENT_MANAGER_URL": newer_manager, "GPUSLICE_AGENT_JOIN_TOKEN": "gsj_x",
        "GPUSLICE_AGENT_NODE_NAME": "older-node", "GPUSLICE_AGENT_ACCELERATOR": "mock",
        "GPUSLICE_AGENT_DATA_DIR": str(tmp_path / "agent"),
    }
    done = cli(env, "agent", "serve")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert message == "error: " + (
        f"the manager at {newer_manager} runs gpuslice 0.2.0 (API revision 2), this agent is "
        f"gpuslice {__version__} (API revision 1): run `pip install gpuslice==0.2.0` on this "
        "node, or upgrade both")


def _mock(handler: object) -> Client:
    return Client("http://manager", "gsu_t", transport=httpx.MockTransport(handler))  # type: ignore


def test_the_sdk_reads_an_older_manager_and_refuses_a_different_one() -> None:
    page = {"items": [], "total": 0, "limit": 100, "offset": 0}
    # A manager from before the version headers speaks revision 1: this one's.
    with _mock(lambda request: httpx.Response(200, json=page)) as client:
        assert client.list_sessions().total == 0
    older = {"X-Gpuslice-Version": "0.0.9", "X-Gpuslice-Api": "0"}
    with _mock(lambda request: httpx.Response(200, json=page, headers=older)) as client:
        with pytest.raises(ApiError) as raised:
            client.list_sessions()
    assert raised.value.message == (
        f"the manager at http://manager runs gpuslice 0.0.9 (API revision 0), this is gpuslice "
        f"{__version__} (API revision 1): install the manager's version here (`pip install "
        "gpuslice==0.0.9`), or ask an admin to upgrade the manager")
    # A proxy's error page states no version: it is not taken for a manager's answer.
    with _mock(lambda request: httpx.Response(502, text="<html>bad gateway</html>")) as client:
        with pytest.raises(ApiError) as raised:
            client.list_sessions()
    assert raised.value.status == 502


def test_the_sdk_names_an_answer_it_cannot_read_and_a_broken_connection() -> None:
    with _mock(lambda request: httpx.Response(200, json={"items": "?"})) as client:
        with pytest.raises(ApiError) as raised:
            client.list_sessions()
    assert raised.value.code == "bad_answer"
    assert raised.value.message.startswith(
        "the manager at http://manager answered GET /sessions in a form this gpuslice "
        f"({__version__}) does not read (")

    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    with _mock(broken) as client, pytest.raises(ApiError) as raised:
        client.create_sessions(image="x:1")
    assert raised.value.code == "no_answer"
    assert raised.value.message == (
        "the manager at http://manager stopped answering (the connection broke: Server "
        "disconnected without sending a response.): what was asked may or may not have been "
        "done")
