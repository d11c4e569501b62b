"""The session events a channel may choose (issue 43): each arrives once, with what the spec
says it carries: preempted (the reason as its owner sees it), cancelled, the time-limit warning
(the signal and the time left), still PENDING after the channel's threshold (the scheduler's
reason and the queue position)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI

from gpuslice.manager import loop_table
from gpuslice.manager.scheduler import Policy
from gpuslice.manager.settings import ManagerSettings, NotifySettings
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status
from tests.manager.notify_receivers import http_receiver
from tests.waits import Deadline


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    settings.sessions.time_limit_interval = 0.2
    settings.sessions.max_time_limit = 86400
    settings.sessions.time_limit_warning = 1
    settings.scheduler.policy = Policy.BACKFILL
    settings.monitoring.reclaim_interval = 0.2
    notify = NotifySettings(allowed_targets=["127.0.0.1/32"], retry_schedule=[0.3],
                            interval=0.2, idle_warning_before=60)
    return settings.model_copy(update={"notify": notify})


async def hook(client: Client, url: str, *events: str, **more: Any) -> None:
    r = await client.post("/api/v1/notifications/channels",
                          json={"kind": "webhook", "target": url, "events": list(events),
                                **more})
    assert r.status_code == 201, r.text


async def test_a_preempted_session_tells_its_owner_why(
    admin: Client, make_agent: AgentFactory, make_user: UserFactory,
) -> None:
    await make_agent("node-1", devices=[gpu(0)])
    r = await admin.patch("/api/v1/priority-classes/normal", json={"min_runtime_s": 0})
    assert r.status_code == 200, r.text
    r = await admin.post("/api/v1/priority-classes",
                         json={"name": "high", "rank": 10, "any_project": True})
    assert r.status_code == 201, r.text
    alice, bob = await make_user("alice"), await make_user("bob")
    with http_receiver() as receiver:
        await hook(alice, receiver.url, "preempted")
        [low] = await create(alice, name="train-1", type="batch", command=["python", "t.py"],
                             resources={"gpu": 1})
        await wait_status(alice, low["id"], {"RUNNING"})
        [win] = await create(bob, name="train-3", type="batch", command=["python", "t.py"],
                             resources={"gpu": 1}, priority_class="high")
        [post] = await receiver.wait(1)
    event = json.loads(post.body)
    assert event["type"] == "session.preempted" and event["session"]["id"] == low["id"]
    assert event["data"]["reason"].startswith(
        "preempted by a session of another user (priority high)")
    assert "bob" not in post.body.decode() and "train-3" not in post.body.decode()
    assert win["id"] not in post.body.decode()


async def test_a_cancelled_session_is_told(make_user: UserFactory) -> None:
    alice = await make_user("alice")
    with http_receiver() as receiver:
        await hook(alice, receiver.url, "cancelled", "failed")
        [s] = await create(alice, name="never")  # no node: it waits
        r = await alice.post("/api/v1/sessions/destroy", json={"ids": [s["id"]]})
        assert r.status_code == 200, r.text
        [post] = await receiver.wait(1)
    event = json.loads(post.body)
    assert (event["type"], event["session"]["name"]) == ("session.cancelled", "never")
    assert event["session"]["status"] == "CANCELLED"


async def test_a_session_near_its_time_limit_is_warned_once(
    app: FastAPI, make_agent: AgentFactory, make_user: UserFactory,
) -> None:
    alice = await make_user("alice")
    agent = await make_agent("node-1")
    with http_receiver() as receiver:
        await hook(alice, receiver.url, "time_limit_warning")
        [s] = await create(alice, resources={"gpu": 0.5}, time_limit=2)
        [post] = await receiver.wait(1)
        await wait_status(alice, s["id"], {"TERMINATED"})
        await loop_table.run_once(app, "notifications")
    event = json.loads(post.body)
    assert event["type"] == "session.time_limit_warning" and event["session"]["id"] == s["id"]
    assert event["data"]["signal"] == "SIGUSR1" and 0 <= event["data"]["left_s"] <= 1
    assert event["data"]["ends_at"]
    assert agent.signals == [(s["id"], "SIGUSR1")] and len(receiver.posts) == 1


async def test_an_idle_session_is_warned_once_before_it_is_reclaimed(
    make_agent: AgentFactory, make_user: UserFactory,
) -> None:
    alice = await make_user("alice", policy={"idle": {"window": 2, "gpu_util": 1}})
    agent = await make_agent("gpu-node")
    with http_receiver() as receiver:
        await hook(alice, receiver.url, "idle_warning", "finished")
        [s] = await create(alice, name="idle", resources={"gpu": 0.25})
        await wait_status(alice, s["id"], {"RUNNING"})
        clock_ms, deadline = 1_000_000, Deadline(30)
        while len(receiver.posts) < 2:  # the warning, then its end
            assert not deadline.passed, receiver.posts
            clock_ms += 300  # the agent's measurements: the GPU idle
            agent.usage = {s["id"]: {
                "cpu": 250, "mem": 2**30, "at_ms": clock_ms, "interval_ms": 300,
                "gpus": [{"uuid": "GPU-mock-0", "mem_used": 0, "utilization": 0}]}}
            await agent.heartbeat()
            await asyncio.sleep(0.2)
    warning, ended = (json.loads(p.body) for p in receiver.posts)
    assert warning["type"] == "session.idle_warning" and warning["session"]["id"] == s["id"]
    assert warning["data"]["kind"] == "idle" and "GPU util < 1 %" in warning["data"]["reason"]
    assert warning["data"]["left_s"] <= 2 and warning["data"]["due_at"]
    assert ended["type"] == "session.finished"
    assert ended["data"]["reason"] == "idle for 2 s: GPU util < 1 %"


async def test_a_session_pending_too_long_is_told_with_the_reason_and_position(
    app: FastAPI, make_agent: AgentFactory, make_user: UserFactory,
) -> None:
    alice = await make_user("alice")
    await make_agent("node-1", devices=[gpu(0)])
    with http_receiver() as receiver:
        await hook(alice, receiver.url, "pending_long", pending_after=1)
        [first] = await create(alice, name="holds", type="batch", command=["x"],
                               resources={"gpu": 1})
        await wait_status(alice, first["id"], {"RUNNING"})
        [waits] = await create(alice, name="waits", resources={"gpu": 1})
        [post] = await receiver.wait(1)
        await loop_table.run_once(app, "notifications")
        assert len(receiver.posts) == 1  # once per session and channel
    event = json.loads(post.body)
    assert (event["type"], event["session"]["id"]) == ("session.pending_long", waits["id"])
    assert event["data"]["position"] == 1 and event["data"]["waiting_s"] >= 1
    assert "GPU" in event["data"]["reason"], event  # the scheduler's reason, in words
