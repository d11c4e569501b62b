"""The users' scenario through the HTTP API, with an in-process fake agent reporting RUNNING."""

from __future__ import annotations

from typing import Any

from tests.manager.conftest import AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status, wait_until


def _count(states: list[dict[str, Any]], status: str) -> int:
    return sum(s["status"] == status for s in states)


async def test_two_fgpu_three_sessions_then_destroy_one(
    admin: Client, make_agent: AgentFactory, make_user: Any
) -> None:
    await make_agent("node-1", devices=[gpu(0)], fgpu_per_gpu=2)  # 2 fGPU of capacity
    alice = await make_user("alice")

    created = await create(alice, count=3, resources={"gpu": 1, "cpu": 1, "mem": "1g"})
    assert [s["status"] for s in created] == ["PENDING"] * 3
    ids = [s["id"] for s in created]

    states = await wait_until(alice, ids, lambda s: _count(s, "RUNNING") == 2 and all(
        x["status"] != "PENDING" or x["queue_position"] for x in s
    ))
    running = [s for s in states if s["status"] == "RUNNING"]
    pending = [s for s in states if s["status"] == "PENDING"]
    assert len(running) == 2 and len(pending) == 1
    waiting = pending[0]
    assert waiting["wait_code"] == "capacity"
    assert "fGPU" in waiting["status_reason"], waiting["status_reason"]
    assert waiting["queue_position"] == 1
    placed = running[0]["placement"]
    assert placed["node_name"] == "node-1"
    assert placed["devices"][0]["fraction"] == 0.5
    assert placed["devices"][0]["mem"] == 20 * 1024**3
    history = [h["status"] for h in running[0]["history"]]
    assert history == ["PENDING", "SCHEDULED", "PREPARING", "RUNNING"]

    r = await alice.delete(f"/api/v1/sessions/{running[0]['id']}")
    assert r.status_code == 200 and r.json()["status"] == "TERMINATING"
    # Placed by the wake-up the freed capacity sends, not the scheduler's next tick (how
    # soon is bench/start_latency.py's to measure).
    last = await wait_status(alice, pending[0]["id"], {"SCHEDULED", "RUNNING"})
    assert last["status"] in {"SCHEDULED", "RUNNING"}, last
    gone = await wait_status(alice, running[0]["id"], {"TERMINATED"})
    assert gone["status"] == "TERMINATED"
    assert gone["placement"]["devices"] == []  # released

    nodes = (await admin.get("/api/v1/nodes")).json()
    assert nodes[0]["devices"][0]["used"] == 2.0  # two sessions of 1 fGPU


async def test_logs_come_from_the_agent(make_agent: AgentFactory, admin: Client) -> None:
    await make_agent("node-1")
    [session] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, session["id"], {"RUNNING"})
    r = await admin.get(f"/api/v1/sessions/{session['id']}/logs", params={"tail": 50})
    assert r.status_code == 200, r.text
    assert r.json()["logs"] == f"hello from {session['id']} (tail 50)\n"


async def test_logs_outlive_the_container(make_agent: AgentFactory, admin: Client) -> None:
    await make_agent("node-1")
    [session] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, session["id"], {"RUNNING"})
    await admin.delete(f"/api/v1/sessions/{session['id']}")
    await wait_status(admin, session["id"], {"TERMINATED"})
    r = await admin.get(f"/api/v1/sessions/{session['id']}/logs")
    assert r.json()["logs"] == f"bye from {session['id']}\n"
