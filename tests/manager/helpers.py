"""Waits the manager's tests share: a session's status through the API, on the suite's
timeout scale (tests/waits.py). Each returns what it saw last when its bound passes, so the
caller's assertion says what the session was instead."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

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
