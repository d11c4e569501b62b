"""The platform's decisions on a user's sessions are audited (issue 43): a time limit, a
preemption and a quota refusal each leave a row naming the system as the actor."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.scheduler import Policy
from gpuslice.manager.services.monitoring.reclaim import reclaim_pass
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows
from tests.manager.conftest import IMAGE, AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    settings.sessions.time_limit_interval = 0.2
    settings.scheduler.policy = Policy.BACKFILL
    return settings


async def test_a_time_limit_reached_is_audited(
    app: FastAPI, make_agent: AgentFactory, admin: Client
) -> None:
    await make_agent("node-1")
    [s] = await create(admin, resources={"gpu": 0.5}, time_limit=1)
    done = await wait_status(admin, s["id"], {"TERMINATED", "ERROR"})
    assert done["status_reason"] == "time limit reached (1s)"
    [row] = await rows(app, action="session.time_limit")
    assert (row.actor_type, row.actor_id, row.target_type, row.target_id, row.outcome) == (
        "system", "system:timelimit", "session", s["id"], "success")


async def test_a_preemption_is_audited_with_its_winner(
    app: FastAPI, admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)])
    r = await admin.patch("/api/v1/priority-classes/normal", json={"min_runtime_s": 0})
    assert r.status_code == 200, r.text
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "any_project": True})
    assert r.status_code == 201, r.text
    alice, bob = await make_user("alice"), await make_user("bob")
    [low] = await create(alice, type="batch", command=["t"], resources={"gpu": 1})
    await wait_status(alice, low["id"], {"RUNNING"})
    [win] = await create(bob, type="batch", command=["t"], resources={"gpu": 1},
                         priority_class="high")
    assert (await wait_status(bob, win["id"], {"RUNNING"}))["status"] == "RUNNING"
    [row] = await rows(app, action="session.preempt")
    assert (row.actor_id, row.target_id) == ("system:scheduler", low["id"])
    assert f'"winner":"{win["id"]}"' in (row.details or "")
    # alice's own security log never names bob's session
    assert win["id"] not in (await alice.get("/api/v1/auth/activity")).text


async def test_a_quota_refusal_is_audited(app: FastAPI, admin: Client, make_user: Any) -> None:
    alice = await make_user("alice", policy={"max_gpu": 0.5})
    r = await alice.post("/api/v1/sessions", json={"image": IMAGE, "resources": {"gpu": 1}},
                         headers={"X-Request-Id": "quota-000001"})
    assert r.status_code == 422 and r.json()["code"] == "quota_exceeded", r.text
    [row] = await rows(app, request_id="quota-000001")
    assert (row.action, row.outcome, row.reason, row.actor_name) == (
        "session.create", "failure", "quota_exceeded", "alice")


@pytest.mark.loops_off("idle_reclaim")
async def test_a_reclaim_over_a_lifetime_is_audited(
    app: FastAPI, make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1")
    alice = await make_user("alice", policy={"max_lifetime": 60})
    [s] = await create(alice, resources={"gpu": 0.5})
    await wait_status(alice, s["id"], {"RUNNING"})
    later = utcnow() + timedelta(minutes=5)
    assert await reclaim_pass(app.state.sessionmaker, timedelta(seconds=30), later) == [s["id"]]
    [row] = await rows(app, action="session.reclaim")
    assert (row.actor_id, row.target_id) == ("system:reclaim", s["id"])
    assert '"kind":"lifetime"' in (row.details or ""), row.details
