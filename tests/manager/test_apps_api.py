"""A session's apps through the API: listing them with their states, starting one (the agent
answers ``apps`` requests), and apps asked for when the session is created."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gpuslice.common.images import LABEL_APPS
from tests.manager.conftest import AgentFactory, UserFactory, create
from tests.waits import Deadline

IMAGE = "apps:1"
APPS = [
    {"name": "echo", "protocol": "http", "port": 8765, "command": ["echo-app", "{port}"]},
    {"name": "notebook", "protocol": "http", "port": 8888, "base_path": True,
     "command": ["nb", "--base={base_path}", "--token={token}"], "start_timeout": 90},
    {"name": "db", "protocol": "tcp", "port": 5432},  # declared, never started by us
]
DETAILS = [{"tag": IMAGE, "image_id": "sha256:" + "2" * 64, "size": 1,
            "labels": {LABEL_APPS: json.dumps(APPS)}}]


def failing(request: dict[str, Any]) -> dict[str, Any]:
    """Apps answer: the one asked to start failed; the others are stopped."""
    start = request["ask"]["start"]
    return {"apps": [
        {"name": a["name"], "state": "failed", "exit_code": 3, "message": "it exited",
         "logs": "line 1\noops: no config\n"} if a["name"] == start
        else {"name": a["name"], "state": "stopped"} for a in request["ask"]["apps"]
    ]}


async def running(client: httpx.AsyncClient, **body: Any) -> str:
    [session] = await create(client, image=IMAGE, resources={"cpu": 1, "mem": "1g"}, **body)
    deadline = Deadline(10)
    while (r := await client.get(f"/api/v1/sessions/{session['id']}")).json()["status"] != (
            "RUNNING"):
        if deadline.passed:
            raise AssertionError(r.json())
        await asyncio.sleep(0.05)
    return str(session["id"])


@pytest.fixture
async def agent(make_agent: AgentFactory) -> Any:
    return await make_agent(images=[IMAGE], image_details=DETAILS)


async def test_apps_are_listed_with_their_states_and_urls(
    admin: httpx.AsyncClient, agent: Any
) -> None:
    sid = await running(admin)
    r = await admin.get(f"/api/v1/sessions/{sid}/apps")
    assert r.status_code == 200, r.text
    listed = {a["name"]: a for a in r.json()["apps"]}
    assert list(listed) == ["terminal", "echo", "notebook", "db"]
    assert listed["terminal"]["protocol"] == "tty" and listed["terminal"]["state"] == "ready"
    assert listed["echo"]["url"] == f"http://echo--{sid}.apps.localhost/"  # its own origin
    assert listed["notebook"]["state"] == "ready"  # the fake agent's answer
    [asked] = [r for a in agent.seen for r in a["requests"] if r["ask"]["kind"] == "apps"]
    launches = {a["name"]: a for a in asked["ask"]["apps"]}
    assert launches["notebook"]["start_timeout_ms"] == 90_000
    token = launches["notebook"]["command"][2].removeprefix("--token=")
    assert len(token) == 48 and launches["notebook"]["command"][1] == "--base=/"
    assert launches["db"]["command"] == []


def serving(request: dict[str, Any]) -> dict[str, Any]:
    """Apps answer: all ready, and a server on 8000 and the declared echo's port served."""
    assert request["ask"]["ports"] is True
    return {"apps": [{"name": a["name"], "state": "ready"} for a in request["ask"]["apps"]],
            "ports": [{"port": 8765, "process": "python3", "command": "python3 echo.py"},
                      {"port": 8000, "process": "streamlit", "command": "streamlit run a.py"}]}


async def test_ports_served_in_the_session_are_apps_after_the_declared_ones(
    admin: httpx.AsyncClient, make_agent: AgentFactory
) -> None:
    await make_agent(images=[IMAGE], image_details=DETAILS, apps_answer=serving)
    sid = await running(admin)
    r = await admin.get(f"/api/v1/sessions/{sid}/apps")
    assert r.status_code == 200, r.text
    listed = {a["name"]: a for a in r.json()["apps"]}
    assert list(listed) == ["terminal", "echo", "notebook", "db", "8000"]
    assert listed["echo"]["process"] == "python3" and not listed["echo"]["discovered"]
    served = listed["8000"]
    assert served["discovered"] and served["port"] == 8000 and served["state"] == "ready"
    assert served["process"] == "streamlit" and served["command"] == "streamlit run a.py"
    assert served["url"] == f"http://8000--{sid}.apps.localhost/"  # its own origin, too


async def test_starting_an_app_waits_for_it_or_says_why_it_failed(
    admin: httpx.AsyncClient, make_agent: AgentFactory
) -> None:
    await make_agent(images=[IMAGE], image_details=DETAILS, apps_answer=failing)
    sid = await running(admin)
    terminal = await admin.post(f"/api/v1/sessions/{sid}/apps/terminal/start")
    assert terminal.json()["state"] == "ready"
    r = await admin.post(f"/api/v1/sessions/{sid}/apps/echo/start")
    assert r.status_code == 409 and r.json()["code"] == "app_failed"
    message = r.json()["message"]
    assert message.startswith("echo failed to start (exit code 3): it exited")
    assert "oops: no config" in message
    unknown = await admin.post(f"/api/v1/sessions/{sid}/apps/nope/start")
    assert unknown.status_code == 404 and "its apps: terminal, echo, notebook, db" in unknown.text


async def test_two_app_tokens_differ_and_stay_the_same(
    admin: httpx.AsyncClient, agent: Any
) -> None:
    first, second = await running(admin), await running(admin)
    for _ in range(2):
        for sid in (first, second):
            await admin.get(f"/api/v1/sessions/{sid}/apps")
    asked = [r for a in agent.seen for r in a["requests"] if r["ask"]["kind"] == "apps"]
    tokens = {(r["session_id"], a["command"][2]) for r in asked for a in r["ask"]["apps"]
              if a["name"] == "notebook"}
    assert len(tokens) == 2  # one per session, the same at every ask


async def test_only_the_owner_lists_or_starts_apps_of_a_running_session(
    admin: httpx.AsyncClient, agent: Any, make_user: UserFactory
) -> None:
    bob = await make_user("bob")
    bobs = await running(bob)
    assert (await bob.get(f"/api/v1/sessions/{bobs}/apps")).status_code == 200
    refused = await admin.get(f"/api/v1/sessions/{bobs}/apps")
    assert refused.status_code == 403 and refused.json()["code"] == "not_owner"
    mine = await running(admin)
    assert (await bob.get(f"/api/v1/sessions/{mine}/apps")).status_code == 404
    assert (await bob.post(f"/api/v1/sessions/{mine}/apps/echo/start")).status_code == 404
    await admin.delete(f"/api/v1/sessions/{mine}")
    gone = await admin.get(f"/api/v1/sessions/{mine}/apps")
    assert gone.status_code == 409 and gone.json()["code"] == "not_running"


async def test_apps_asked_for_at_creation_come_with_the_assignment(
    admin: httpx.AsyncClient, agent: Any
) -> None:
    sid = await running(admin, apps=["notebook"])
    [launch] = agent.assignments[sid]["apps"]
    assert launch["name"] == "notebook" and launch["port"] == 8888
    assert launch["command"][1] == "--base=/"
    bad = await create(admin, expect=422, image=IMAGE, apps=["db"])
    assert bad["field"] == "apps"
    assert bad["message"] == f"apps: image {IMAGE} has no app 'db' to start; it can start: " \
        "echo, notebook"
