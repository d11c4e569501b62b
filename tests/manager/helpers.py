"""What the manager's tests share, through the API: waits on a session's status, on the
suite's timeout scale (tests/waits.py), each returning what it saw last when its bound passes
(so the caller's assertion says what the session was instead); and steps several test files
take (a running session, its commit, a project with members)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from tests.manager.conftest import Client, create
from tests.waits import Deadline

# A bound for a fake agent's round trips through the loops: long enough for a loaded machine
# (a passing wait returns as soon as the status is there).
WAIT_S = 20.0


async def wait_status(
    client: httpx.AsyncClient, session_id: str, statuses: set[str], timeout: float = WAIT_S
) -> dict[str, Any]:
    """The session once its status is one of ``statuses`` (or as it is when time is up)."""
    deadline = Deadline(timeout)
    while True:
        body: dict[str, Any] = (await client.get(f"/api/v1/sessions/{session_id}")).json()
        if body["status"] in statuses or deadline.passed:
            return body
        await asyncio.sleep(0.02)


async def wait_until(
    client: httpx.AsyncClient, ids: list[str], done: Callable[[list[dict[str, Any]]], bool],
    timeout: float = WAIT_S,
) -> list[dict[str, Any]]:
    """The sessions ``ids`` once ``done(them)`` holds (or as they are when time is up)."""
    deadline = Deadline(timeout)
    while True:
        states = [(await client.get(f"/api/v1/sessions/{i}")).json() for i in ids]
        if done(states) or deadline.passed:
            return states
        await asyncio.sleep(0.02)


async def running_session(client: Client, **body: Any) -> dict[str, Any]:
    """A session made with ``body``, once it runs."""
    [s] = await create(client, **body)
    assert (await wait_status(client, s["id"], {"RUNNING"}))["status"] == "RUNNING"
    return s


async def commit(client: Client, session_id: str, name: str) -> Any:
    """The answer to committing the session into the image ``name``."""
    return await client.post(f"/api/v1/sessions/{session_id}/commit", json={"name": name})


async def make_project(
    admin: Client, name: str, *members: str, **quotas: object
) -> dict[str, Any]:
    """A project with ``quotas``, and ``members`` added by the admin (its last answer)."""
    r = await admin.post("/api/v1/projects", json={"name": name, **quotas})
    assert r.status_code == 201, r.text
    for member in members:
        r = await admin.post(f"/api/v1/projects/{name}/members", json={"username": member})
        assert r.status_code == 200, r.text
    return r.json()
