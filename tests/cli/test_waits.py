"""Commands that wait exit 0 only for what they promise: a session that ends in ERROR or
CANCELLED, or a --timeout that passes, is a non-zero exit and a line on stderr that names the
session and says why.

The manager runs in this test's event loop (served over HTTP), the node is the fake agent of
the manager's tests (its sessions end as the test reports them), and the CLI is a real
`gpuslice` in a subprocess, awaited so that the manager serves it meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import GPUSLICE
from tests.manager.conftest import (  # noqa: F401 (fixtures)
    IMAGE,
    AgentFactory,
    Client,
    _routed_app,
    admin,
    anon,
    app,
    base_url,
    make_agent,
    settings,
)
from tests.waits import scaled

DOOMED = "image python:3.11 could not be pulled: manifest unknown"


@dataclass(frozen=True)
class Done:
    code: int | None
    out: str
    err: str


@dataclass(frozen=True)
class Cli:
    env: dict[str, str]
    api: Client  # the admin's, whom the CLI is logged in as

    async def start(self, *args: str, cwd: Path | None = None) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            GPUSLICE, *args, env=self.env, cwd=cwd, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)

    async def run(self, *args: str, cwd: Path | None = None) -> Done:
        return await finish(await self.start(*args, cwd=cwd))

    async def session(self, name: str, statuses: set[str]) -> dict[str, Any]:
        """The session of this name once it is in one of ``statuses``."""
        async with asyncio.timeout(scaled(30)):
            while True:
                r = await self.api.get("/api/v1/sessions", params={"name": name})
                found = r.json()["items"]
                if found and found[0]["status"] in statuses:
                    return found[0]
                await asyncio.sleep(0.05)


@pytest.fixture
async def cli(base_url: str, admin: Client, tmp_path: Path) -> AsyncIterator[Cli]:  # noqa: F811
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    token = admin.headers["Authorization"].split()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
        "GPUSLICE_URL": base_url, "GPUSLICE_TOKEN": token}
    yield Cli(env, admin)


async def finish(process: asyncio.subprocess.Process) -> Done:
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return Done(process.returncode, out.decode(), err.decode())


SMALL = ("--image", IMAGE, "--cpu", "0.25", "--mem", "64m")


# ------------------------------------------------------------ session create --wait


async def test_create_wait_succeeds_for_a_session_queued_with_its_reason(cli: Cli) -> None:
    done = await cli.run("session", "create", "--name", "queued", *SMALL, "--wait", "--json")
    assert done.code == 0, done.err
    [session] = json.loads(done.out)
    assert session["status"] == "PENDING" and session["wait_code"] is not None


async def test_create_wait_fails_when_a_session_ends_in_error(
    cli: Cli, make_agent: AgentFactory,  # noqa: F811
) -> None:
    agent = await make_agent(auto_run=False)
    waiting = await cli.start("session", "create", "--name", "doomed", "--count", "2", *SMALL,
                              "--wait", "--json")
    for name in ("doomed-1", "doomed-2"):
        session = await cli.session(name, {"SCHEDULED"})
        await agent.report(session["id"], "PREPARING")
    await agent.report(session["id"], "ERROR", reason=DOOMED)  # doomed-2 fails
    first = await cli.session("doomed-1", {"PREPARING"})
    await agent.report(first["id"], "RUNNING")
    done = await finish(waiting)
    assert done.code == 1
    # the sessions as last seen, for scripts, in every case
    assert [s["status"] for s in json.loads(done.out)] == ["RUNNING", "ERROR"]
    assert done.err == f"error: session doomed-2 ({session['id'][:12]}) ended ERROR: {DOOMED}\n"


@pytest.mark.loops_off("scheduler")  # sessions wait PENDING with no reason yet, as in the
# moment between their creation and the first pass
async def test_create_wait_fails_when_a_session_is_cancelled(cli: Cli) -> None:
    waiting = await cli.start("session", "create", "--name", "gone", *SMALL, "--wait")
    session = await cli.session("gone", {"PENDING"})
    await cli.api.delete(f"/api/v1/sessions/{session['id']}")
    done = await finish(waiting)
    assert done.code == 1
    assert "CANCELLED" in done.out  # the table, as without a failure
    assert done.err == (f"error: session gone ({session['id'][:12]}) ended CANCELLED: "
                        "stopped by admin\n")


@pytest.mark.loops_off("scheduler")
async def test_create_wait_timeout_exits_124_and_every_session_that_still_waits_says_so(
    cli: Cli,
) -> None:
    done = await cli.run("session", "create", "--name", "slow", "--count", "2", *SMALL,
                         "--wait", "--timeout", "0.5", "--json")
    assert done.code == 124
    sessions = json.loads(done.out)
    assert [s["status"] for s in sessions] == ["PENDING", "PENDING"]
    assert done.err.splitlines() == [
        f"error: session {s['name']} ({s['id'][:12]}) is still PENDING after 0.5s: waiting "
        f"for the scheduler; it goes on (stop it: gpuslice session destroy {s['name']})"
        for s in sessions]


# ------------------------------------------------------------ session logs -f


async def test_logs_follow_fails_when_the_session_ends_in_error(
    cli: Cli, make_agent: AgentFactory,  # noqa: F811
) -> None:
    agent = await make_agent()
    await cli.run("session", "create", "--name", "talks", *SMALL)
    session = await cli.session("talks", {"RUNNING"})
    following = await cli.start("session", "logs", "-f", "talks")
    assert following.stdout is not None
    assert "hello from" in (await following.stdout.readline()).decode()  # following
    await agent.report(session["id"], "ERROR", reason="out of memory", logs="the end\n")
    done = await finish(following)
    assert done.code == 1
    assert "the end" in done.out  # its last output is printed before
    assert done.err == f"error: session talks ({session['id'][:12]}) ended ERROR: out of memory\n"


async def test_logs_follow_fails_when_the_session_is_cancelled(cli: Cli) -> None:
    await cli.run("session", "create", "--name", "never", *SMALL)
    session = await cli.session("never", {"PENDING"})
    following = await cli.start("session", "logs", "-f", "never")
    # cancelled while it follows, or before it first looks: the same end either way
    await cli.api.delete(f"/api/v1/sessions/{session['id']}")
    done = await finish(following)
    assert done.code == 1
    assert done.err == (f"error: session never ({session['id'][:12]}) ended CANCELLED: "
                        "stopped by admin\n")


async def test_logs_follow_timeout_exits_124(cli: Cli) -> None:
    await cli.run("session", "create", "--name", "idle", *SMALL)
    session = await cli.session("idle", {"PENDING"})
    done = await cli.run("session", "logs", "-f", "idle", "--timeout", "0.3")
    assert done.code == 124
    assert done.err.startswith(f"error: session idle ({session['id'][:12]}) is still PENDING "
                               "after 0.3s: ")


# ------------------------------------------------------------ run


async def test_run_fails_when_its_session_ends_in_error(
    cli: Cli, make_agent: AgentFactory, tmp_path: Path,  # noqa: F811
) -> None:
    agent = await make_agent(auto_run=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    running = await cli.start("run", "train.py", "--name", "t1", *SMALL, cwd=tmp_path)
    session = await cli.session("t1", {"SCHEDULED"})
    await agent.report(session["id"], "ERROR", reason=DOOMED)
    done = await finish(running)
    assert done.code == 1
    assert f"error: session t1 ({session['id'][:12]}) ended ERROR: {DOOMED}\n" in done.err


async def test_run_fails_when_it_is_cancelled(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    running = await cli.start("run", "train.py", "--name", "t2", *SMALL, cwd=tmp_path)
    session = await cli.session("t2", {"PENDING"})
    await cli.api.delete(f"/api/v1/sessions/{session['id']}")
    done = await finish(running)
    assert done.code == 1
    assert (f"error: session t2 ({session['id'][:12]}) ended CANCELLED: stopped by admin\n"
            in done.err)


async def test_run_timeout_exits_124_and_leaves_the_run(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    done = await cli.run("run", "train.py", "--name", "t3", *SMALL, "--timeout", "0.5",
                         cwd=tmp_path)
    assert done.code == 124
    session = await cli.session("t3", {"PENDING"})
    assert (f"error: session t3 ({session['id'][:12]}) is still PENDING after 0.5s: "
            in done.err)
    assert "gpuslice run logs t3 -f" in done.err  # how to follow it from here
