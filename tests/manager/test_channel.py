"""The request channel's own rules, whatever the kind: delivered at most once, answered only by
its node with an answer of its kind, never after its waiter gave up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.common.schemas.agents import ExecAnswer, ExecAsk, LogsAnswer, LogsAsk
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.errors import Conflict
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.nodes.assignments import long_poll
from tests.manager.conftest import AgentFactory, Client, create
from tests.manager.fake_agent import FakeAgent, requests_of
from tests.manager.helpers import wait_status
from tests.waits import scaled


async def _node_with_session(admin: Client, make_agent: AgentFactory) -> tuple[FakeAgent, str]:
    agent = await make_agent(auto_run=False)  # it sees requests but answers none
    [s] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "RUNNING")
    return agent, s["id"]


async def _first_request(agent: FakeAgent, timeout: float = 2.0) -> dict[str, Any]:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        for answer in agent.seen:
            if answer["requests"]:
                return answer["requests"][0]
        await asyncio.sleep(0.01)
    raise AssertionError("no request reached the agent")


def _ask(app: FastAPI, node_id: str, session_id: str, timeout: float) -> asyncio.Task[Any]:
    channel: Channel = app.state.channel
    question = ExecAsk(command=["true"], timeout_ms=1000)
    return asyncio.create_task(
        channel.ask(node_id, question, ExecAnswer, timeout=timeout, session_id=session_id)
    )


async def test_a_request_is_delivered_in_one_answer_only(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await _node_with_session(admin, make_agent)
    waiting = _ask(app, agent.node_id, sid, timeout=5)
    request = await _first_request(agent)
    assert request["session_id"] == sid and request["ask"]["kind"] == "exec"
    # Every later answer, long-poll or not, leaves it out: a lost answer is a timeout, never a
    # command run twice (an agent that restarts asks with no version and gets it no more).
    fresh = await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0})
    assert fresh.json()["requests"] == []
    delivered = [r for a in agent.seen for r in a["requests"]]
    assert [r["id"] for r in delivered] == [request["id"]]

    r = await agent.answer(request["id"], "exec", {"exit_code": 0, "stdout": "ok\n"})
    assert r.status_code == 204
    got = await waiting
    assert isinstance(got, ExecAnswer) and got.stdout == "ok\n"


async def test_an_answer_of_another_kind_is_refused_and_the_request_stays_open(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await _node_with_session(admin, make_agent)
    waiting = _ask(app, agent.node_id, sid, timeout=5)
    request = await _first_request(agent)
    r = await agent.answer(request["id"], "logs", {"logs": "not what was asked\n"})
    assert r.status_code == 422 and r.json()["field"] == "kind"
    assert "exec" in r.json()["message"]
    r = await agent.answer(request["id"], "exec", {"exit_code": 7})
    assert r.status_code == 204
    assert (await waiting).exit_code == 7  # type: ignore[union-attr]


async def test_a_request_nobody_awaits_cannot_be_answered(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await _node_with_session(admin, make_agent)
    waiting = _ask(app, agent.node_id, sid, timeout=0.3)
    request = await _first_request(agent)
    assert await waiting is None  # the waiter gave up: the request is gone with it
    r = await agent.answer(request["id"], "exec", {"exit_code": 0})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = await agent.answer("no-such-request", "logs", {"logs": ""})
    assert r.status_code == 404


async def test_asking_a_lost_node_is_a_conflict_at_once(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await _node_with_session(admin, make_agent)
    async with app.state.sessionmaker() as db:
        await db.execute(update(NodeRow).values(status="LOST"))
        await db.commit()
    channel: Channel = app.state.channel
    started = time.monotonic()
    with pytest.raises(Conflict) as failed:
        await channel.ask(agent.node_id, LogsAsk(tail=1), LogsAnswer, timeout=5,
                          session_id=sid, about="session x")
    assert failed.value.code == "node_lost" and "session x" in failed.value.message
    assert time.monotonic() - started < 1.0
    assert not any(requests_of(a, "logs") for a in agent.seen)


async def test_a_long_poll_whose_agent_hung_up_delivers_nothing(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    # A SIGKILLed agent's long-poll stays parked on the manager until it notices; a request
    # handed to it would be lost while the restarted agent polls beside it.
    agent, sid = await _node_with_session(admin, make_agent)
    await agent.stop()  # nobody takes requests in the background any more
    waiting = _ask(app, agent.node_id, sid, timeout=5)

    async def gone() -> bool:
        return True

    sessionmaker, hub = app.state.sessionmaker, app.state.hub
    dead = await long_poll(sessionmaker, hub, agent.node_id, None, 0, gone=gone)
    assert dead.requests == []
    alive = await long_poll(sessionmaker, hub, agent.node_id, None, 0)
    [request] = alive.requests
    assert request.session_id == sid
    waiting.cancel()


async def test_a_change_another_replica_made_reaches_a_parked_long_poll(
    app: FastAPI, make_agent: AgentFactory
) -> None:
    # Another replica's commit wakes nobody here: this replica's version watcher (one query per
    # `assignment_poll`, 0.5 s in these tests, for every node at once) finds it.
    agent = await make_agent(auto_run=False)
    sessionmaker, hub = app.state.sessionmaker, app.state.hub
    async with sessionmaker() as db:
        [version] = (await db.execute(
            update(NodeRow).where(NodeRow.id == agent.node_id)
            .values(assignment_version=NodeRow.assignment_version)
            .returning(NodeRow.assignment_version)
        )).scalars().all()
        await db.commit()
    parked = asyncio.create_task(long_poll(sessionmaker, hub, agent.node_id, version, 20))
    await asyncio.sleep(1.2)  # a few of the watcher's looks: nothing moved, it stays parked
    assert not parked.done()
    started = time.monotonic()
    async with sessionmaker() as db:  # as another replica would: no wake-up in this hub
        await db.execute(update(NodeRow).where(NodeRow.id == agent.node_id)
                         .values(assignment_version=version + 1))
        await db.commit()
    answer = await asyncio.wait_for(parked, scaled(5))
    assert answer.version == version + 1
    assert time.monotonic() - started < 2.0  # the watcher's interval, not the 20 s wait
