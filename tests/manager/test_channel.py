"""The request channel's own rules, whatever the kind: delivered at most once, answered only by
its node with an answer of its kind, never after its waiter gave up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.common.schemas.agents import ExecAnswer, LogsAnswer, LogsAsk
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.errors import Conflict
from gpuslice.manager.services import channel as channel_module
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.nodes.assignments import long_poll
from tests.manager.channel_helpers import ask, asked, node_with_session
from tests.manager.conftest import AgentFactory, Client
from tests.manager.fake_agent import FakeAgent, requests_of
from tests.waits import scaled


async def _first_request(agent: FakeAgent, timeout: float = 2.0) -> dict[str, Any]:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        for answer in agent.seen:
            if answer["requests"]:
                return answer["requests"][0]
        await asyncio.sleep(0.01)
    raise AssertionError("no request reached the agent")


class _Clock:
    """``time`` for the channel's waiters: the real monotonic clock plus ``offset``."""

    offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


async def test_a_request_is_delivered_in_one_answer_only(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await node_with_session(admin, make_agent)
    waiting = ask(app, agent.node_id, sid, timeout=5)
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
    agent, sid = await node_with_session(admin, make_agent)
    waiting = ask(app, agent.node_id, sid, timeout=5)
    request = await _first_request(agent)
    r = await agent.answer(request["id"], "logs", {"logs": "not what was asked\n"})
    assert r.status_code == 422 and r.json()["field"] == "kind"
    assert "exec" in r.json()["message"]
    r = await agent.answer(request["id"], "exec", {"exit_code": 7})
    assert r.status_code == 204
    assert (await waiting).exit_code == 7  # type: ignore[union-attr]


async def test_a_request_nobody_awaits_cannot_be_answered(
    app: FastAPI, admin: Client, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, sid = await node_with_session(admin, make_agent)
    # The waiter's clock, moved on once the agent has the request: it gives up then, however
    # long the delivery took (a short real timeout could expire before it on a loaded machine).
    later = _Clock()
    monkeypatch.setattr(channel_module, "time", later)
    waiting = ask(app, agent.node_id, sid, timeout=60)
    request = await _first_request(agent)
    later.offset = 120.0  # its next look (within `assignment_poll`) is past its deadline
    # the waiter gave up: the request is gone with it (still within its expiry)
    assert await asyncio.wait_for(waiting, scaled(5)) is None
    r = await agent.answer(request["id"], "exec", {"exit_code": 0})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = await agent.answer("no-such-request", "logs", {"logs": ""})
    assert r.status_code == 404


async def test_asking_a_lost_node_is_a_conflict_at_once(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent, sid = await node_with_session(admin, make_agent)
    async with app.state.sessionmaker() as db:
        await db.execute(update(NodeRow).values(status="LOST"))
        await db.commit()
    channel: Channel = app.state.channel
    # At once: an ask that waited for the agent would take its whole hour-long timeout.
    with pytest.raises(Conflict) as failed:
        async with asyncio.timeout(scaled(10)):
            await channel.ask(agent.node_id, LogsAsk(tail=1), LogsAnswer, timeout=3600,
                              session_id=sid, about="session x")
    assert failed.value.code == "node_lost" and "session x" in failed.value.message
    assert not any(requests_of(a, "logs") for a in agent.seen)


async def test_a_long_poll_whose_agent_hung_up_delivers_nothing(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    # A SIGKILLed agent's long-poll stays parked on the manager until it notices; a request
    # handed to it would be lost while the restarted agent polls beside it.
    agent, sid = await node_with_session(admin, make_agent)
    await agent.stop()  # nobody takes requests in the background any more
    waiting = await asked(app, agent.node_id, sid, timeout=60)  # in time for both polls

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
    # An hour's wait: an answer within the bound below is the watcher's, never the wait's end.
    parked = asyncio.create_task(long_poll(sessionmaker, hub, agent.node_id, version, 3600))
    # A bounded look (it can only pass too easily on a slow machine): a few of the watcher's
    # looks, nothing moved, it stays parked.
    await asyncio.sleep(1.2)
    assert not parked.done()
    async with sessionmaker() as db:  # as another replica would: no wake-up in this hub
        await db.execute(update(NodeRow).where(NodeRow.id == agent.node_id)
                         .values(assignment_version=version + 1))
        await db.commit()
    answer = await asyncio.wait_for(parked, scaled(5))  # the watcher's interval is 0.5 s
    assert answer.version == version + 1
