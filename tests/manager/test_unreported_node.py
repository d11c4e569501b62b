"""A session asked for right after a node joined, before its first report, waits for that
report rather than being refused as one no node could ever hold (issue 41, "Also": `gpuslice
up` answers before its local node reported)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gpuslice.manager.loop_table import run_once

from .conftest import Client, UserFactory, client_for, create
from .fake_agent import FakeAgent


@pytest.mark.loops_off("scheduler")
async def test_a_session_waits_for_a_joined_nodes_first_report(
    app: FastAPI, admin: Client, make_user: UserFactory,
) -> None:
    r = await admin.post("/api/v1/join-tokens", json={"name": "join-lab-01"})
    assert r.status_code == 201, r.text
    agent = FakeAgent(client_for(app), r.json()["token"], "lab-01", devices=[])
    try:
        # registered, as the agent does first; its first heartbeat has not come yet
        r = await agent.client.post("/api/v1/agents/register",
                                    json={"join_token": agent.join_token, "name": "lab-01"})
        assert r.status_code == 201, r.text
        agent.client.headers["Authorization"] = f"Bearer {r.json()['credential']}"
        alice = await make_user("alice")
        [session] = await create(alice, resources={"cpu": "0.25", "mem": "256MiB"})
        assert session["status"] == "PENDING"

        await run_once(app, "scheduler")
        seen = (await alice.get(f"/api/v1/sessions/{session['id']}")).json()
        assert seen["status"] == "PENDING"
        assert seen["status_reason"] == (
            "no node in resource group 'default' has reported its capacity yet: waiting for "
            "the first report of node lab-01")

        await agent.heartbeat()
        await run_once(app, "scheduler")
        seen = (await alice.get(f"/api/v1/sessions/{session['id']}")).json()
        assert seen["status"] != "PENDING" and seen["placement"]["node_name"] == "lab-01", seen
    finally:
        await agent.client.aclose()
