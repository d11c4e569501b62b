"""Agents: registration, assignment delivery, state reports, lost nodes and their return."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from gpuslice.manager.app import create_app
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.loop_table import run_once
from gpuslice.manager.services.nodes import assignments
from gpuslice.manager.services.nodes.liveness import sweep_lost
from gpuslice.manager.services.scheduling.snapshot import alive_nodes
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import AgentFactory, Client, client_for, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status
from tests.waits import Deadline, await_for, scaled


async def test_register_needs_a_valid_join_token(anon: Client, admin: Client) -> None:
    r = await anon.post("/api/v1/agents/register", json={"join_token": "gsj_x", "name": "n1"})
    assert r.status_code == 401 and r.json()["code"] == "bad_join_token"
    token = (await admin.post("/api/v1/join-tokens", json={"name": "j"})).json()
    assert (await admin.delete(f"/api/v1/join-tokens/{token['id']}")).status_code == 204
    r = await anon.post(
        "/api/v1/agents/register", json={"join_token": token["token"], "name": "n1"}
    )
    assert r.status_code == 401


async def test_only_an_active_join_token_is_revoked(anon: Client, admin: Client) -> None:
    # Issue 34, finding 10: a used token admits nobody; "revoking" it claimed to shut out the
    # node that joined with it, which it does not. The listing says each token's state.
    used = (await admin.post("/api/v1/join-tokens", json={"name": "used"})).json()
    active = (await admin.post("/api/v1/join-tokens", json={"name": "spare"})).json()
    r = await anon.post("/api/v1/agents/register",
                        json={"join_token": used["token"], "name": "n1"})
    assert r.status_code == 201, r.text
    listed = {t["name"]: t["status"] for t in (await admin.get("/api/v1/join-tokens")).json()}
    assert listed == {"used": "used", "spare": "active"}
    refused = await admin.delete(f"/api/v1/join-tokens/{used['id']}")
    assert (refused.status_code, refused.json()["code"]) == (409, "token_used")
    assert refused.json()["message"] == (
        "join token used was used already; it admits no other node, so there is nothing to "
        "revoke (to shut out the node that joined with it, revoke that node)")
    assert (await admin.delete(f"/api/v1/join-tokens/{active['id']}")).status_code == 204
    listed = {t["name"]: t["status"] for t in (await admin.get("/api/v1/join-tokens")).json()}
    assert listed == {"used": "used"}


async def test_users_tokens_are_not_node_credentials(admin: Client) -> None:
    r = await admin.post("/api/v1/agents/me/heartbeat", json={"cpu": 1, "mem": 1})
    assert r.status_code == 401


async def test_a_new_session_reaches_its_agent_well_under_a_second(
    admin: Client, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent's long-poll waits a minute at most (the API's longest): a delivery within the
    # bound below is the poll woken by the placement, never its wait's end (how fast: the
    # figure printed, and bench/).
    parked = 0  # long-polls now waiting for the node to change
    real_wait = assignments.wait_event

    async def counted(event: asyncio.Event, timeout: float) -> bool:
        nonlocal parked
        parked += 1
        try:
            return await real_wait(event, timeout)
        finally:
            parked -= 1

    monkeypatch.setattr(assignments, "wait_event", counted)
    agent = await make_agent(auto_run=False, poll_wait=60)

    async def waiting() -> bool:
        return parked == 1

    await await_for(waiting, 30, "the agent's long-poll waiting")
    seen_before = len(agent.seen)
    started = time.monotonic()
    [s] = await create(admin, resources={"gpu": 0.5})
    deadline = Deadline(5)
    while not any(a["session_id"] == s["id"] for x in agent.seen[seen_before:]
                  for a in x["sessions"]):
        await asyncio.sleep(0.005)
        assert not deadline.passed, "the placement did not wake the agent's long-poll"
    delivered = next(a for x in agent.seen for a in x["sessions"] if a["session_id"] == s["id"])
    assert delivered["desired"] == "running" and delivered["status"] == "SCHEDULED"
    assert delivered["slices"] == [{  # exact units: milli-fGPU, bytes, a decimal string
        "device_index": 0, "device_uuid": "GPU-mock-0", "gpu": 500, "fraction": "0.5",
        "mem": 20 * 1024**3, "sms": 54, "capacity": 1000, "sm_percent": 50,
    }]
    print(f"create -> delivered to agent: {(time.monotonic() - started) * 1000:.1f} ms")


async def test_batch_exit_codes_give_results(admin: Client, make_agent: AgentFactory) -> None:
    agent = await make_agent(auto_run=False)
    ok, bad = await create(admin, count=2, type="batch", command=["python", "-c", "1"])
    for s in (ok, bad):
        await wait_status(admin, s["id"], {"SCHEDULED"})
        assert (await agent.report(s["id"], "RUNNING")).json() == {"status": "RUNNING"}
    await agent.report(ok["id"], "TERMINATED", exit_code=0)
    await agent.report(bad["id"], "TERMINATED", exit_code=3)
    done_ok = (await admin.get(f"/api/v1/sessions/{ok['id']}")).json()
    done_bad = (await admin.get(f"/api/v1/sessions/{bad['id']}")).json()
    assert (done_ok["status"], done_ok["result"]) == ("TERMINATED", "SUCCESS")
    assert (done_bad["result"], done_bad["exit_code"]) == ("FAILED", 3)
    assert done_bad["status_reason"] == "exited with code 3"
    # A late or repeated report changes nothing; an illegal one is refused clearly.
    assert (await agent.report(ok["id"], "RUNNING")).json() == {"status": "TERMINATED"}
    r = await agent.report(ok["id"], "PENDING")
    assert r.status_code == 422 and r.json()["field"] == "status"


async def test_agent_failure_is_an_error_with_its_reason(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, resources={"gpu": 1})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    r = await agent.report(s["id"], "ERROR", reason="image pull failed: no such image")
    assert r.json() == {"status": "ERROR"}
    body = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert body["status_reason"] == "image pull failed: no such image"
    node = (await admin.get("/api/v1/nodes")).json()[0]
    assert node["devices"][0]["used"] == 0  # released


async def test_reports_for_another_nodes_session_are_404(
    admin: Client, make_agent: AgentFactory
) -> None:
    one = await make_agent("node-1", auto_run=False)
    two = await make_agent("node-2", auto_run=False, devices=[])
    [s] = await create(admin, resources={"gpu": 1})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    assert (await two.report(s["id"], "RUNNING")).status_code == 404
    assert (await one.report(s["id"], "RUNNING")).status_code == 200


async def test_lost_node_errors_its_sessions_and_comes_back(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    [s] = await create(admin, resources={"gpu": 1})
    await wait_status(admin, s["id"], {"RUNNING"})
    async with app.state.sessionmaker() as db:  # its heartbeats stopped a minute ago
        await db.execute(
            update(NodeRow).values(last_heartbeat_at=utcnow() - timedelta(minutes=1))
        )
        await db.commit()
    assert await sweep_lost(app.state.sessionmaker, timeout=30) == 1
    body = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert (body["status"], body["status_reason"]) == ("ERROR", "node lost")
    node = (await admin.get("/api/v1/nodes")).json()[0]
    assert node["status"] == "LOST" and node["devices"][0]["used"] == 0
    assert node["cpu_used"] == 0 and node["mem_used"] == 0

    ack = await agent.heartbeat()  # it comes back, still running the old container
    assert ack["status"] == "ALIVE"
    answer = await _assignments(agent)
    assert answer["sessions"] == []  # so the agent stops it
    [again] = await create(admin, resources={"gpu": 1})
    assert (await wait_status(admin, again["id"], {"RUNNING"}))["status"] == "RUNNING"


async def test_destroying_a_running_session_goes_through_terminating(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, resources={"gpu": 1})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "RUNNING")
    assert (await admin.delete(f"/api/v1/sessions/{s['id']}")).json()["status"] == "TERMINATING"
    answer = await _assignments(agent)
    assert [(a["session_id"], a["desired"]) for a in answer["sessions"]] == [(s["id"], "stopped")]
    await agent.report(s["id"], "RUNNING")  # late: must not undo the stop
    assert (await admin.get(f"/api/v1/sessions/{s['id']}")).json()["status"] == "TERMINATING"
    await agent.report(s["id"], "TERMINATED", reason="stopped")
    assert (await _assignments(agent))["sessions"] == []


async def _assignments(agent: Any) -> dict[str, Any]:
    r = await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0})
    assert r.status_code == 200, r.text
    return r.json()


async def test_long_poll_waits_when_nothing_changed(
    app: FastAPI, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    first = await _assignments(agent)
    started = time.monotonic()
    r = await agent.client.get(
        "/api/v1/agents/me/assignments", params={"since": first["version"], "wait": 0.3}
    )
    assert r.json()["version"] == first["version"]
    assert time.monotonic() - started >= 0.3
    async with client_for(app) as nobody:
        assert (await nobody.get("/api/v1/agents/me/assignments")).status_code == 401


async def test_a_restarted_manager_gives_nodes_one_timeout_before_calling_them_lost(
    settings: ManagerSettings, make_agent: AgentFactory, app: FastAPI, admin: Client
) -> None:
    """After downtime every heartbeat is old; the sweep must not fire before agents report."""
    await make_agent()
    async with app.state.sessionmaker() as db:  # as if the manager had been down a minute
        await db.execute(
            update(NodeRow).values(last_heartbeat_at=utcnow() - timedelta(minutes=1))
        )
        await db.commit()
    restarted = create_app(settings, loops_off=["node_sweep"])
    async with restarted.router.lifespan_context(restarted):
        for _ in range(5):  # each judges the minute-old heartbeat
            await run_once(restarted, "node_sweep")
        async with restarted.state.sessionmaker() as db:
            assert await db.scalar(select(NodeRow.status)) == "ALIVE"


async def test_the_slice_fraction_is_the_same_in_the_api_and_on_the_wire(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False, fgpu_per_gpu=3)  # 1 fGPU is a third of a GPU
    [s] = await create(admin, resources={"gpu": 1})
    body = await wait_status(admin, s["id"], {"SCHEDULED"})
    [api_slice] = body["placement"]["devices"]
    deadline = time.monotonic() + scaled(2)
    while not (wire := next((a for x in agent.seen for a in x["sessions"]
                             if a["session_id"] == s["id"]), None)):
        assert time.monotonic() < deadline, "the session did not reach its agent"
        await asyncio.sleep(0.01)
    [wire_slice] = wire["slices"]
    assert api_slice["fraction"] == 0.3333 and wire_slice["fraction"] == "0.3333"
    exact = (wire_slice["gpu"], wire_slice["capacity"], wire_slice["sm_percent"])
    assert exact == (1000, 3000, 33)
    assert wire["resources"] == {"gpu": 1000, "cpu": 1000, "mem": 1024**3}


async def test_a_heartbeat_that_reports_the_same_is_cheap_and_any_change_is_applied(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False, devices=[gpu(0), gpu(1)])

    async def node() -> dict[str, Any]:
        return (await admin.get("/api/v1/nodes")).json()[0]

    async def digest() -> str | None:
        async with app.state.sessionmaker() as db:
            found = await db.scalar(select(NodeRow.report_digest))
            await db.commit()
            return found

    await agent.heartbeat()
    applied = await digest()
    assert applied is not None  # all of it applied: the next same report is one UPDATE
    before = (await node())["last_heartbeat_at"]
    await agent.heartbeat()
    assert await digest() == applied and (await node())["last_heartbeat_at"] > before

    agent.images = [*agent.images, "python:3.12"]  # a new image: applied, a new digest
    await agent.heartbeat()
    assert "python:3.12" in (await node())["images"] and await digest() not in (None, applied)

    # A session holds GPU 1 and most of the CPU while the node reports less of both: the
    # report is applied as far as it can be, and again at each heartbeat until it all is.
    [s] = await create(admin, resources={"gpu": 2, "cpu": 2})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    agent.devices, agent.cpu = [gpu(0)], 1000
    await agent.heartbeat()
    held = await node()
    assert [d["index"] for d in held["devices"]] == [0, 1] and held["cpu"] == 2
    assert await digest() is None
    await agent.heartbeat()  # still held: still the full path
    assert [d["index"] for d in (await node())["devices"]] == [0, 1]
    await admin.delete(f"/api/v1/sessions/{s['id']}")
    await wait_status(admin, s["id"], {"CANCELLED", "TERMINATING", "TERMINATED"})
    await agent.report(s["id"], "TERMINATED", exit_code=0)
    await agent.heartbeat()
    freed = await node()
    assert [d["index"] for d in freed["devices"]] == [0] and freed["cpu"] == 1
    assert await digest() is not None

    # A LOST node's report is applied in full whatever its digest.
    async with app.state.sessionmaker() as db:
        await db.execute(update(NodeRow).values(status="LOST"))
        await db.commit()
    assert (await agent.heartbeat())["status"] == "ALIVE"
    assert (await node())["status"] == "ALIVE"


async def test_the_scheduler_reads_each_alive_node_with_its_devices_in_order(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    await make_agent("gpus", devices=[gpu(1, mem=80 * 2**30), gpu(0)])
    await make_agent("cpu-only", devices=[], cpu=4000)
    [session] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, session["id"], {"RUNNING"})
    gone = await make_agent("gone", devices=[gpu(0)])
    async with app.state.sessionmaker() as db:
        await db.execute(update(NodeRow).where(NodeRow.name == "gone").values(status="LOST"))
        await db.commit()
        nodes = {n.name: n for n in await alive_nodes(db)}
    assert set(nodes) == {"gpus", "cpu-only"}, gone
    assert nodes["cpu-only"].devices == [] and nodes["cpu-only"].cpu == 4000
    devices = nodes["gpus"].devices
    assert [(d.index, d.mem) for d in devices] == [(0, 40 * 2**30), (1, 80 * 2**30)]
    assert sum(d.used for d in devices) == 500  # the session's half GPU, on one of them


async def test_the_nodes_own_reports_wake_no_long_poll(
    admin: Client, make_agent: AgentFactory, app: FastAPI
) -> None:
    """PREPARING, RUNNING and an end come from the node itself: no new answer for it (its
    version stays); the end still frees the slice at once."""
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, s["id"], {"SCHEDULED"})

    async def version() -> int:
        async with app.state.sessionmaker() as db:
            return await db.scalar(select(NodeRow.assignment_version)) or 0

    placed = await version()
    deadline = time.monotonic() + scaled(5)  # the placement's own answer may still be on its way
    while not any(a["version"] == placed for a in agent.seen) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    answers = len(agent.seen)
    assert agent.seen[-1]["version"] == placed
    for status in ("PREPARING", "RUNNING"):
        assert (await agent.report(s["id"], status)).json() == {"status": status}
    # Bounded looks (they can only pass too easily on a slow machine): a long-poll woken by
    # the reports would have answered by now.
    await asyncio.sleep(0.2)
    assert await version() == placed and len(agent.seen) == answers
    await agent.report(s["id"], "TERMINATED", exit_code=0)
    await asyncio.sleep(0.2)
    assert await version() == placed and len(agent.seen) == answers
    async with app.state.sessionmaker() as db:
        assert await db.scalar(select(NodeRow.cpu_used)) == 0
    [again] = await create(admin, resources={"gpu": 1})  # the whole GPU is free again
    await wait_status(admin, again["id"], {"SCHEDULED"})
    assert await version() == placed + 1  # a placement is news to the node
