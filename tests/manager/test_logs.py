"""Session logs: kept from the final state report, empty before the start, else from the agent."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import AgentRequestRow, NodeRow, SessionRow
from gpuslice.manager.services.nodes.liveness import sweep_lost
from gpuslice.manager.services.sessions import agent as session_agent
from gpuslice.manager.services.sessions import logs as late_logs
from gpuslice.manager.services.sessions.logs import LATE_LOGS_S
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.helpers import wait_status
from tests.waits import scaled

OUTPUT = "".join(f"line {i}\n" for i in range(1, 6))


async def _logs(client: Client, session_id: str, **params: int) -> tuple[str, float]:
    started = time.monotonic()
    r = await client.get(f"/api/v1/sessions/{session_id}/logs", params=params)
    assert r.status_code == 200, r.text
    assert r.json()["session_id"] == session_id
    return r.json()["logs"], time.monotonic() - started


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sessions whose agent is asked for its logs from now on (an ask waits up to the
    agent's log timeout, 3 s): what "at once" means, exactly, whatever the machine's speed."""
    sessions: list[str] = []
    real_ask = session_agent.ask

    async def counted(channel: Any, row: SessionRow, *args: Any, **kwargs: Any) -> Any:
        sessions.append(row.id)
        return await real_ask(channel, row, *args, **kwargs)

    monkeypatch.setattr(session_agent, "ask", counted)
    return sessions


@pytest.fixture
def late_wait_a_minute(monkeypatch: pytest.MonkeyPatch) -> float:
    """The wait for late logs made a minute: an answer within a few (scaled) seconds did not
    wait for them."""
    monkeypatch.setattr(late_logs, "LATE_LOGS_S", 60.0)
    return 60.0


async def _log_requests(app: FastAPI) -> int:
    async with app.state.sessionmaker() as db:
        count = select(func.count()).where(AgentRequestRow.kind == "logs")
        return await db.scalar(count) or 0


async def test_final_logs_are_kept_and_served_without_the_agent(
    app: FastAPI, admin: Client, make_agent: AgentFactory, asked: list[str],
    late_wait_a_minute: float,
) -> None:
    agent = await make_agent(auto_run=False)  # it would never answer a log request
    ok, failed = await create(admin, count=2, resources={"gpu": 0.5})
    for s in (ok, failed):
        await wait_status(admin, s["id"], {"SCHEDULED"})
        await agent.report(s["id"], "RUNNING")
    r = await agent.report(ok["id"], "TERMINATED", exit_code=0, logs=OUTPUT)
    assert r.json() == {"status": "TERMINATED"}
    await agent.report(failed["id"], "ERROR", reason="OOM", logs="Killed\n")

    logs, took = await _logs(admin, ok["id"])
    # kept: the agent (which would never answer) is not asked, the late logs not waited for
    assert logs == OUTPUT and asked == [] and took < scaled(5)
    assert (await _logs(admin, ok["id"], tail=2))[0] == "line 4\nline 5\n"
    assert (await _logs(admin, failed["id"], tail=10))[0] == "Killed\n"
    assert await _log_requests(app) == 0
    assert not any(answer["requests"] for answer in agent.seen)

    # A repeated report (its answer was lost) neither changes nor duplicates them.
    await agent.report(ok["id"], "TERMINATED", exit_code=0, logs="other\n")
    assert (await _logs(admin, ok["id"]))[0] == OUTPUT
    body = (await admin.get(f"/api/v1/sessions/{ok['id']}")).json()
    assert "final_logs" not in body and "logs" not in body


async def test_logs_reported_just_after_the_end_reach_a_reader_who_asked_in_between(
    admin: Client, make_agent: AgentFactory, late_wait_a_minute: float
) -> None:
    # The agent tells the end as the processes die, and sends the logs once dockerd has
    # cleaned the container up: `gpuslice run` reading the last lines at the end gets them.
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "RUNNING")
    await agent.report(s["id"], "TERMINATED", exit_code=0)
    reading = asyncio.create_task(_logs(admin, s["id"], tail=2))
    await asyncio.sleep(0.3)  # a bounded look: it only passes too easily on a slow machine
    assert not reading.done()  # waits for them
    r = await agent.report(s["id"], "TERMINATED", exit_code=0, logs=OUTPUT)
    assert r.json() == {"status": "TERMINATED"}
    logs, took = await reading
    # woken by their coming, not at the end of the (minute-long) wait for them
    assert logs == "line 4\nline 5\n" and took < scaled(10)
    assert (await admin.get(f"/api/v1/sessions/{s['id']}")).json()["status"] == "TERMINATED"


async def test_ended_sessions_without_kept_logs_answer_empty_logs(
    app: FastAPI, admin: Client, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await make_agent(auto_run=False)
    [ended] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, ended["id"], {"SCHEDULED"})
    before_end = time.monotonic()  # the end's time is taken after this, in the report
    await agent.report(ended["id"], "TERMINATED", exit_code=1)  # its logs never come
    logs, _ = await _logs(admin, ended["id"], tail=5)  # waited for, a while
    waited = time.monotonic() - before_end  # LATE_LOGS_S from the end, at least
    assert logs == "" and LATE_LOGS_S - 0.5 < waited < LATE_LOGS_S + scaled(2)
    late = 60.0  # long ended: no wait, even were the wait a minute
    monkeypatch.setattr(late_logs, "LATE_LOGS_S", late)
    async with app.state.sessionmaker() as db:
        await db.execute(update(SessionRow).where(SessionRow.id == ended["id"]).values(
            updated_at=utcnow() - timedelta(seconds=late)))
        await db.commit()
    logs, took = await _logs(admin, ended["id"], tail=5)
    assert (logs, took < scaled(5)) == ("", True)


async def test_not_started_sessions_answer_empty_logs_at_once(
    app: FastAPI, admin: Client, make_agent: AgentFactory, asked: list[str]
) -> None:
    [pending] = await create(admin, resources={"gpu": 0.5})  # no node yet
    logs, _ = await _logs(admin, pending["id"])
    assert (logs, asked) == ("", [])  # at once: no agent asked
    await admin.delete(f"/api/v1/sessions/{pending['id']}")  # CANCELLED: empty as well
    assert (await _logs(admin, pending["id"]))[0] == ""

    await make_agent(auto_run=False)
    [scheduled] = await create(admin, resources={"gpu": 0.5})
    assert (await wait_status(admin, scheduled["id"], {"SCHEDULED"}))["status"] == "SCHEDULED"
    logs, _ = await _logs(admin, scheduled["id"])
    assert (logs, asked) == ("", [])  # its agent would never answer: not asked
    assert await _log_requests(app) == 0


async def test_logs_reported_after_a_lost_node_returns_are_kept(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "RUNNING")
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(NodeRow).values(last_heartbeat_at=utcnow() - timedelta(minutes=1))
        )
        await db.commit()
    await sweep_lost(app.state.sessionmaker, timeout=30)  # ERROR "node lost", no logs
    assert (await _logs(admin, s["id"]))[0] == ""
    await agent.heartbeat()  # back: it stops the container and sends what it printed
    r = await agent.report(s["id"], "TERMINATED", exit_code=137, logs=OUTPUT)
    assert r.json() == {"status": "ERROR"}
    assert (await _logs(admin, s["id"], tail=1))[0] == "line 5\n"


async def test_other_users_cannot_read_kept_logs(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    alice, bob = await make_user("alice"), await make_user("bob")
    [s] = await create(alice, resources={"gpu": 0.5})
    await wait_status(alice, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "TERMINATED", exit_code=0, logs="secret\n")
    r = await bob.get(f"/api/v1/sessions/{s['id']}/logs")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert (await _logs(alice, s["id"]))[0] == "secret\n"
    assert (await _logs(admin, s["id"]))[0] == "secret\n"
