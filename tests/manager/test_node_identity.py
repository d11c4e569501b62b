"""Node identity (issue 16, finding 2): a join token cannot take over an existing node; tokens
are single-use and short-lived; admins re-key and revoke nodes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from fastapi import FastAPI

from gpuslice.manager.db.base import utcnow
from tests.manager.conftest import AgentFactory, Client, client_for, create
from tests.manager.helpers import wait_status


async def _join_token(admin: Client, **body: Any) -> str:
    r = await admin.post("/api/v1/join-tokens", json={"name": "t", **body})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


async def _register(anon: Client, token: str | None, name: str, **kw: Any) -> Any:
    body = {"name": name} if token is None else {"join_token": token, "name": name}
    return await anon.post("/api/v1/agents/register", json=body, **kw)


async def test_a_join_token_cannot_take_over_an_existing_node(
    admin: Client, anon: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)  # registered as node-1
    [s] = await create(admin, env={"SECRET": "s3cret"})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    r = await _register(anon, await _join_token(admin), "node-1")
    assert r.status_code == 409 and r.json()["code"] == "node_exists", r.text
    assert "rekey" in r.json()["message"] and "credential" not in r.json()
    # the real node keeps working and keeps its sessions
    assert (await agent.heartbeat())["node_id"] == agent.node_id
    answer = (await agent.client.get("/api/v1/agents/me/assignments")).json()
    assert [a["session_id"] for a in answer["sessions"]] == [s["id"]]


async def test_join_tokens_are_single_use_and_short_lived(admin: Client, anon: Client) -> None:
    r = await admin.post("/api/v1/join-tokens", json={"name": "t"})
    created = r.json()
    lifetime = created["expires_at"]
    assert lifetime is not None
    token = created["token"]
    assert (await _register(anon, token, "fresh-1")).status_code == 201
    r = await _register(anon, token, "fresh-2")
    assert r.status_code == 401 and r.json()["code"] == "bad_join_token", r.text
    listed = {t["id"]: t for t in (await admin.get("/api/v1/join-tokens")).json()}
    assert listed[created["id"]]["status"] == "used"
    # the default lifetime is an hour
    from datetime import datetime
    ends = datetime.fromisoformat(lifetime.replace("Z", "+00:00"))
    assert ends - utcnow() <= timedelta(hours=1)


async def test_two_agents_racing_with_one_token_get_one_node(
    admin: Client, app: FastAPI
) -> None:
    token = await _join_token(admin)
    clients = [client_for(app) for _ in range(4)]
    try:
        answers = await asyncio.gather(*(
            _register(c, token, f"racer-{i}") for i, c in enumerate(clients)
        ))
    finally:
        for c in clients:
            await c.aclose()
    assert sorted(r.status_code for r in answers) == [201, 401, 401, 401]


async def test_a_bound_token_registers_only_its_node(admin: Client, anon: Client) -> None:
    token = await _join_token(admin, node="gpu-07")
    r = await _register(anon, token, "gpu-08")
    assert r.status_code == 401 and "gpu-07" in r.json()["message"]
    assert (await _register(anon, token, "gpu-07")).status_code == 201
    r = await admin.post("/api/v1/join-tokens", json={"name": "x", "rekey": True})
    assert r.status_code == 422 and r.json()["field"] == "rekey"


async def test_a_node_rotates_its_own_credential(
    admin: Client, anon: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    old = agent.client.headers["Authorization"]
    r = await anon.post("/api/v1/agents/register", json={"name": "node-1"},
                        headers={"Authorization": old})
    assert r.status_code == 201, r.text
    assert r.json()["node_id"] == agent.node_id
    r2 = await agent.client.post("/api/v1/agents/me/heartbeat", json={"cpu": 1, "mem": 1})
    assert r2.status_code == 401  # the old credential stopped working
    # a credential of another node does not let one re-register this one
    other = await make_agent("node-2", auto_run=False)
    r = await anon.post("/api/v1/agents/register", json={"name": "node-1"},
                        headers={"Authorization": other.client.headers["Authorization"]})
    assert r.status_code == 401


async def test_admins_revoke_and_rekey_a_node(
    admin: Client, anon: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    [s] = await create(admin)
    await wait_status(admin, s["id"], {"SCHEDULED"})
    r = await admin.post(f"/api/v1/nodes/{agent.node_id}/revoke")
    assert r.status_code == 200 and r.json()["status"] == "REVOKED", r.text
    ended = await wait_status(admin, s["id"], {"ERROR"})
    assert ended["status_reason"] == "node revoked by an admin"
    r = await agent.client.post("/api/v1/agents/me/heartbeat", json={"cpu": 1, "mem": 1})
    assert r.status_code == 401 and r.json()["code"] == "node_revoked"
    assert "gpuslice node rekey node-1" in r.json()["message"]
    r = await agent.client.post("/api/v1/agents/me/heartbeat", json=agent.last_report)
    assert r.status_code == 401  # its usual report too (the one-statement path)
    r = await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0})
    assert r.status_code == 401 and r.json()["code"] == "node_revoked"  # its long-poll too
    r = await anon.get("/api/v1/agents/me/assignments", params={"wait": 0},
                       headers={"Authorization": "Bearer gsn_unknown"})
    assert r.status_code == 401 and "unknown node credential" in r.json()["message"]
    # an ordinary token cannot bring it back; the admin's re-key token can
    assert (await _register(anon, await _join_token(admin), "node-1")).status_code == 409
    r = await _register(anon, await _join_token(admin, node="node-1", rekey=True), "node-1")
    assert r.status_code == 201 and r.json()["node_id"] == agent.node_id
    agent.client.headers["Authorization"] = f"Bearer {r.json()['credential']}"
    assert (await agent.heartbeat())["status"] == "ALIVE"
    nodes = (await admin.get("/api/v1/nodes")).json()
    assert [(n["name"], n["status"], n["revoked_at"]) for n in nodes] == [
        ("node-1", "ALIVE", None)
    ]


async def test_expired_join_tokens_are_refused(app: FastAPI, admin: Client, anon: Client) -> None:
    from sqlalchemy import update

    from gpuslice.manager.db.models import JoinTokenRow

    token = await _join_token(admin)
    async with app.state.sessionmaker() as db:
        await db.execute(update(JoinTokenRow).values(expires_at=utcnow() - timedelta(seconds=1)))
        await db.commit()
    r = await _register(anon, token, "late")
    assert r.status_code == 401 and r.json()["code"] == "bad_join_token"
    assert (await admin.get("/api/v1/join-tokens")).json()[0]["status"] == "expired"


async def test_a_second_live_agent_of_a_node_is_refused_until_the_first_is_silent(
    app: FastAPI, admin: Client, anon: Client
) -> None:
    # Issue 35, finding 2: one name, two agents (a re-key token used while the node runs, or
    # its data directory copied) would both run its sessions.
    from sqlalchemy import update

    from gpuslice.manager.db.models import NodeRow

    first, second = "a" * 32, "b" * 32
    r = await anon.post("/api/v1/agents/register", json={
        "join_token": await _join_token(admin), "name": "twin", "agent_id": first})
    assert r.status_code == 201, r.text
    auth = {"Authorization": f"Bearer {r.json()['credential']}"}
    beat = {"cpu": 1000, "mem": 2**30, "agent_id": first}
    assert (await anon.post("/api/v1/agents/me/heartbeat", json=beat, headers=auth)).is_success

    rekey = await _join_token(admin, node="twin", rekey=True)
    r = await anon.post("/api/v1/agents/register", json={
        "join_token": rekey, "name": "twin", "agent_id": second})
    assert r.status_code == 409 and r.json()["code"] == "node_in_use", r.text
    said = r.json()["message"]
    assert said.startswith("node 'twin' is run by another live agent (its last heartbeat came ")
    assert "stop that agent first, or give this one another node name" in said
    # Its credential in another agent's hands is refused as well; the first goes on.
    r = await anon.post("/api/v1/agents/me/heartbeat", json={**beat, "agent_id": second},
                        headers=auth)
    assert r.status_code == 409 and r.json()["code"] == "node_in_use", r.text
    r = await anon.post("/api/v1/agents/me/heartbeat", json=beat, headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "ALIVE"

    # Once the first is silent (stopped, its machine gone), another agent takes the node over.
    async with app.state.sessionmaker() as db:
        await db.execute(update(NodeRow).values(last_heartbeat_at=utcnow() - timedelta(minutes=1)))
        await db.commit()
    r = await anon.post("/api/v1/agents/register", json={
        "join_token": rekey, "name": "twin", "agent_id": second})
    assert r.status_code == 201, r.text
    taken = {"Authorization": f"Bearer {r.json()['credential']}"}
    r = await anon.post("/api/v1/agents/me/heartbeat", json={**beat, "agent_id": second},
                        headers=taken)
    assert r.status_code == 200, r.text


async def test_a_session_its_node_restarted_says_so_in_its_history(
    admin: Client, make_agent: AgentFactory
) -> None:
    # Issue 35, finding 6: a container adopted with another agent's mounts is made again; the
    # session stays RUNNING, and its owner sees the restart and why.
    agent = await make_agent()
    [s] = await create(admin)
    await wait_status(admin, s["id"], {"RUNNING"})
    why = "restarted: its container was made by another agent (its in-session endpoint ...)"
    r = await agent.report(s["id"], "RUNNING", reason=why, restarted=True)
    assert r.status_code == 200, r.text
    shown = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert (shown["status"], shown["status_reason"]) == ("RUNNING", why)
    last = shown["history"][-1]
    assert (last["from_status"], last["status"], last["reason"]) == ("RUNNING", "RUNNING", why)
    # A plain RUNNING report (the usual one) adds nothing.
    await agent.report(s["id"], "RUNNING", reason="running")
    again = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert len(again["history"]) == len(shown["history"])
