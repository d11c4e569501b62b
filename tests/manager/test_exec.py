"""Exec in a running session: delivered to the agent with its assignments, answered by PUT."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import AgentRequestRow
from gpuslice.manager.services import channel
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import FakeAgent, requests_of
from tests.manager.helpers import wait_status
from tests.waits import scaled


async def _running(client: Client, agent: FakeAgent) -> dict[str, Any]:
    [s] = await create(client, resources={"gpu": 0.5})
    if agent.auto_run:
        assert (await wait_status(client, s["id"], {"RUNNING"}))["status"] == "RUNNING"
    else:
        await wait_status(client, s["id"], {"SCHEDULED"})
        assert (await agent.report(s["id"], "RUNNING")).json() == {"status": "RUNNING"}
    return s


async def _exec(client: Client, session_id: str, *command: str, timeout: float = 5) -> Any:
    return await client.post(
        f"/api/v1/sessions/{session_id}/exec", json={"command": list(command), "timeout": timeout}
    )


async def _open_requests(app: FastAPI) -> int:
    async with app.state.sessionmaker() as db:
        count = select(func.count()).where(AgentRequestRow.kind == "exec")
        return await db.scalar(count) or 0


async def _delivered(agent: FakeAgent, timeout: float = 2.0) -> dict[str, Any]:
    """The first exec request the agent has seen in its assignments."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        for answer in agent.seen:
            if requests_of(answer, "exec"):
                return requests_of(answer, "exec")[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no exec request reached the agent")


async def test_exec_round_trip_through_the_agent(
    app: FastAPI, admin: Client, make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpuslice")
    # Its long-poll waits a minute at most (the API's longest): an answer within the bound
    # below was delivered by waking it, never at the end of its wait.
    agent = await make_agent(poll_wait=60)
    s = await _running(admin, agent)
    started = time.monotonic()
    r = await _exec(admin, s["id"], "echo", "secret-output-42", timeout=7.5)
    took = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert r.json() == {
        "session_id": s["id"], "exit_code": 0, "stdout": "echo secret-output-42\n",
        "stderr": f"in {s['id']} within 7.5s\n",
    }
    assert took < scaled(5), took  # delivered at once, not at the next poll
    print(f"exec round trip: {took * 1000:.1f} ms")
    assert len(agent.executed) == 1 and await _open_requests(app) == 0

    agent.exec_answer = lambda _req: {"exit_code": 3, "stderr": "boom\n"}
    r = await _exec(admin, s["id"], "false")
    assert r.status_code == 200  # a command that fails is still an answer
    assert (r.json()["exit_code"], r.json()["stdout"], r.json()["stderr"]) == (3, "", "boom\n")
    assert len(agent.executed) == 2
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("gpuslice")]
    assert not any("secret-output-42" in m for m in ours)  # neither argv nor output is logged


async def test_only_the_owner_or_an_admin_may_exec(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    s = await _running(alice, agent)
    r = await _exec(bob, s["id"], "id")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert agent.executed == []
    assert (await _exec(alice, s["id"], "id")).status_code == 200
    assert (await _exec(admin, s["id"], "id")).status_code == 200


async def test_exec_needs_a_running_session(
    admin: Client, make_agent: AgentFactory
) -> None:
    [pending] = await create(admin, resources={"gpu": 0.5})  # no node: stays PENDING
    r = await _exec(admin, pending["id"], "ls")
    assert r.status_code == 409 and r.json()["code"] == "not_running"
    assert "PENDING" in r.json()["message"]

    agent = await make_agent()
    s = await _running(admin, agent)
    await admin.delete(f"/api/v1/sessions/{s['id']}")
    await wait_status(admin, s["id"], {"TERMINATED"})
    r = await _exec(admin, s["id"], "ls")
    assert r.status_code == 409 and "TERMINATED" in r.json()["message"]
    assert agent.executed == []

    r = await admin.post(f"/api/v1/sessions/{s['id']}/exec", json={"command": []})
    assert r.status_code == 422 and r.json()["field"] == "command"


async def test_an_agent_that_never_answers_is_a_504(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)  # it sees requests but answers none
    s = await _running(admin, agent)
    began = time.monotonic()
    waiting = asyncio.create_task(_exec(admin, s["id"], "sleep", "1", timeout=0.2))
    request = await _delivered(agent)
    assert request == {
        "id": request["id"], "session_id": s["id"],
        "ask": {"kind": "exec", "command": ["sleep", "1"], "timeout_ms": 200},
    }
    held = []  # no database connection is held while the user request waits
    for _ in range(20):
        held.append(app.state.engine.pool.checkedout())
        await asyncio.sleep(0.05)
    assert min(held) == 0, held

    r = await waiting
    assert r.status_code == 504 and r.json()["code"] == "agent_timeout"
    # timeout + sessions.log_timeout (3 s), and the requests around it
    assert 3.2 <= time.monotonic() - began < 3.2 + scaled(1.8)
    assert await _open_requests(app) == 0
    late = await agent.answer_exec(request["id"], {"exit_code": 0})
    assert late.status_code == 404  # nobody waits for it any more


async def test_only_the_addressed_node_may_answer(
    admin: Client, make_agent: AgentFactory
) -> None:
    one = await make_agent("node-1", auto_run=False)
    two = await make_agent("node-2", auto_run=False, devices=[])
    s = await _running(admin, one)
    waiting = asyncio.create_task(_exec(admin, s["id"], "hostname"))
    request = await _delivered(one)
    assert not any(answer["requests"] for answer in two.seen)

    r = await two.answer_exec(request["id"], {"exit_code": 0, "stdout": "node-2\n"})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = await one.answer_exec(request["id"], {"exit_code": 0, "stdout": "node-1\n"})
    assert r.status_code == 204
    r = await waiting
    assert r.status_code == 200 and r.json()["stdout"] == "node-1\n"
    again = await one.answer_exec(request["id"], {"exit_code": 1})
    assert again.status_code == 404  # answered already


async def test_a_command_the_agent_could_not_run_is_a_409(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(
        exec_answer=lambda _req: {"exit_code": -1, "error": "could not run: no such file"}
    )
    s = await _running(admin, agent)
    r = await _exec(admin, s["id"], "/nope")
    assert r.status_code == 409
    assert r.json() == {
        "code": "exec_failed", "message": "could not run: no such file", "field": None
    }


async def test_expired_requests_are_neither_delivered_nor_kept(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    s = await _running(admin, agent)
    async with app.state.sessionmaker() as db:  # left behind by a manager that died waiting
        for minutes in (2, -5):
            db.add(
                AgentRequestRow(
                    kind="exec", session_id=s["id"], node_id=agent.node_id,
                    payload={"kind": "exec", "command": ["ls"], "timeout_ms": 1000},
                    expires_at=utcnow() - timedelta(minutes=minutes),
                )
            )
        await db.commit()
    # The live one reaches the node once: in this answer or in its own long-poll's.
    answers = [(await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0}))
               .json()]
    deadline = time.monotonic() + scaled(2)
    while not any(requests_of(a, "exec") for a in [*answers, *agent.seen]):
        assert time.monotonic() < deadline, "the live request was not delivered"
        await asyncio.sleep(0.01)
    live = [q for a in [*answers, *agent.seen] for q in requests_of(a, "exec")]
    assert [q["ask"]["command"] for q in live] == [["ls"]]  # the live one only, once
    async with app.state.sessionmaker() as db:
        await channel.purge(db, timedelta(minutes=1))
    assert await _open_requests(app) == 1
