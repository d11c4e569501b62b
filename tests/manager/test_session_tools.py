"""`gpuslice-save` and `gpuslice-run` as a session runs them: the real tools (as processes) on
the real in-session endpoint, relayed by a real `ManagerLink` to the real manager, on both
model store backends (the local store streams through the agent; S3 takes presigned PUTs)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from gpuslice.agent import model_calls
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.manager_link import ManagerLink
from gpuslice.common.schemas.agents import Heartbeat, NodeRegister, StateReport
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.session_tools import TOOLS_DIR
from tests.s3 import s3_server
from tests.waits import Deadline, scaled

from .conftest import Client, UserFactory, create
from .model_helpers import settings

__all__ = ["s3_server", "settings"]
GiB = 1024**3


class _Data:
    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        return None

    def usage(self, session_id: str) -> dict[str, Any] | None:
        return None


@pytest.fixture
async def in_session(
    served: tuple[Client, str, SessionEndpoint]
) -> tuple[Client, str, str]:
    """(alice, her RUNNING session's id, its endpoint socket) on a node linked for real."""
    alice, sid, endpoint = served
    return alice, sid, str(endpoint.socket_path(sid))


@pytest.fixture
async def served(
    app: FastAPI, admin: Client, make_user: UserFactory
) -> AsyncIterator[tuple[Client, str, SessionEndpoint]]:
    """(alice, her RUNNING session's id, the endpoint serving it) on a node linked for real."""
    alice = await make_user("alice")
    work = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))  # socket paths are short
    link = ManagerLink("http://manager", work / "agent", transport=httpx.ASGITransport(app=app))
    token = (await admin.post("/api/v1/join-tokens", json={"name": "n"})).json()["token"]
    await link.connect(NodeRegister(join_token=token, name="node-t"))
    await link.heartbeat(Heartbeat(cpu=8000, mem=16 * GiB))
    [session] = await create(alice, resources={"cpu": 1, "mem": "1g"})
    deadline = Deadline(10)
    while not (await link.assignments(None, 0))[0].sessions:
        assert not deadline.passed, "the session never reached its node"
        await asyncio.sleep(0.1)
    await link.report(session["id"], StateReport(status=SessionStatus.RUNNING))
    endpoint = SessionEndpoint(work / "files", _Data(), link, user="1000:1000")
    model_calls.install(endpoint)
    await endpoint.open(session["id"])
    try:
        yield alice, session["id"], endpoint
    finally:
        await endpoint.stop()
        await link.close()
        shutil.rmtree(work, ignore_errors=True)


async def tool(socket: str, cwd: Path, *argv: str) -> tuple[int, str, str]:
    env = {**os.environ, "GPUSLICE_ENDPOINT": socket, "PYTHONPATH": str(TOOLS_DIR)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_gpuslice_save_a_directory(in_session: tuple[Client, str, str],
                                         tmp_path: Path) -> None:
    alice, sid, socket = in_session
    out = tmp_path / "out"
    (out / "ckpt").mkdir(parents=True)
    (out / "model.txt").write_text("weights\n")
    (out / "ckpt" / "w.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (out / "link").symlink_to("/etc/passwd")
    code, stdout, stderr = await tool(socket, tmp_path, str(TOOLS_DIR / "gpuslice-save"),
                                      "out", "--name", "resnet")
    assert code == 0, stderr
    assert "saved model resnet version 1: 2 file(s), 3.0 MiB" in stdout
    assert "leaving out link (not a regular file)" in stderr
    [model] = (await alice.get("/api/v1/models")).json()
    assert (model["name"], model["files"], model["session_id"]) == ("resnet", 2, sid)
    r = await alice.get("/api/v1/models/resnet/files", params={"path": "ckpt/w.bin"})
    assert r.content == (out / "ckpt" / "w.bin").read_bytes()

    code, _, stderr = await tool(socket, tmp_path, str(TOOLS_DIR / "gpuslice-save"), "nothing")
    assert code == 1 and "gpuslice-save: cannot read nothing" in stderr
    code, _, stderr = await tool(socket, tmp_path, str(TOOLS_DIR / "gpuslice-save"), "out",
                                 "--name", "../up")
    assert code == 1 and "model name '../up'" in stderr


async def test_gpuslice_run_saves_on_success_only(in_session: tuple[Client, str, str],
                                                  tmp_path: Path) -> None:
    alice, _, socket = in_session
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "train.py").write_text(
        "import os, sys\nos.makedirs('output', exist_ok=True)\n"
        "open('output/model.txt', 'w').write('trained\\n')\nprint('epoch 1 done')\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    run = [str(TOOLS_DIR / "gpuslice-run"), "--dir", str(code_dir), "--model", "job-1", "--",
           sys.executable, "train.py"]
    code, stdout, stderr = await tool(socket, tmp_path, *run, "3")
    assert code == 3 and "epoch 1 done" in stdout
    assert "the script exited with code 3" in stderr and "output/ was not saved" in stderr
    assert (await alice.get("/api/v1/models")).json() == []

    code, _, stderr = await tool(socket, tmp_path, *run, "0")
    assert code == 0, stderr
    assert "saved output/ as model job-1:1 (1 file(s))" in stderr
    r = await alice.get("/api/v1/models/job-1/files", params={"path": "model.txt"})
    assert r.content == b"trained\n"


async def test_gpuslice_run_waits_for_the_platform_to_save(
    served: tuple[Client, str, SessionEndpoint], tmp_path: Path
) -> None:
    # Issue 35, finding 4: the script ended while the platform was down (here its node's
    # agent serves no socket, as when `gpuslice up` is stopped): the output was lost, exit 70.
    alice, sid, endpoint = served
    code_dir = tmp_path / "code"
    (code_dir / "output").mkdir(parents=True)
    (code_dir / "train.py").write_text("open('output/model.txt', 'w').write('kept')\n")
    socket = str(endpoint.socket_path(sid))
    await endpoint.close(sid)
    env = {**os.environ, "GPUSLICE_ENDPOINT": socket, "PYTHONPATH": str(TOOLS_DIR)}
    runner = await asyncio.create_subprocess_exec(
        sys.executable, str(TOOLS_DIR / "gpuslice-run"), "--dir", str(code_dir), "--model",
        "kept-1", "--", sys.executable, "train.py", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert runner.stderr is not None
    said = []
    async with asyncio.timeout(scaled(60)):
        while not any("waiting for the manager to save output/" in line for line in said):
            line = (await runner.stderr.readline()).decode()
            assert line, f"gpuslice-run ended before waiting: {said}"
            said.append(line)
    assert "the node's agent does not answer" in said[-1] and runner.returncode is None
    await endpoint.open(sid)  # the platform is back
    _, rest = await asyncio.wait_for(runner.communicate(), scaled(60))
    err = "".join(said) + rest.decode()
    assert runner.returncode == 0, err
    assert "saved output/ as model kept-1:1 (1 file(s))" in err, err
    r = await alice.get("/api/v1/models/kept-1/files", params={"path": "model.txt"})
    assert r.content == b"kept"
