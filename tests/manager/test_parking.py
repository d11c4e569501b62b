"""A long-poll waits outside FastAPI's stack (``api/parking.py``): while it waits it holds no
database session and no route machinery, and its answer, its errors and its hung-up agent are
handled as a route's would be."""

from __future__ import annotations

import asyncio
import errno
import gc
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message

from gpuslice.common.versions import VERSION_HEADER
from gpuslice.manager.api.parking import Parked, Parking
from gpuslice.manager.errors import NotFound
from gpuslice.manager.services.nodes import assignments
from tests.manager.channel_helpers import asked, node_with_session
from tests.manager.conftest import AgentFactory, Client, client_for, create
from tests.waits import await_for

POLLS = 20


def _live(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


def _route_stacks() -> int:
    """FastAPI's per-request handler coroutines now alive (one per request in its route)."""
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "coroutine"
               and o.__qualname__ == "get_request_handler.<locals>.app")


async def test_a_waiting_long_poll_holds_no_session_and_no_route_stack(
    admin: Client, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await make_agent(auto_run=False)
    version = (await agent.client.get("/api/v1/agents/me/assignments",
                                      params={"wait": 0})).json()["version"]
    parked = 0  # this test's polls now waiting for the node to change
    real_wait = assignments.wait_event

    async def counted(event: asyncio.Event, timeout: float) -> bool:
        nonlocal parked
        ours = timeout > 10  # the fake agent's own long-poll waits 5 s at most
        parked += ours
        try:
            return await real_wait(event, timeout)
        finally:
            parked -= ours

    monkeypatch.setattr(assignments, "wait_event", counted)
    gc.collect()
    sessions_before = _live(AsyncSession)
    polls = [asyncio.create_task(agent.client.get(
        "/api/v1/agents/me/assignments", params={"since": version, "wait": 60}))
        for _ in range(POLLS)]

    async def all_parked() -> bool:
        return parked == POLLS

    await await_for(all_parked, 30, "every long-poll waiting")
    gc.collect()
    # Before parking, each waiting poll held two sessions and FastAPI's whole stack.
    assert _live(AsyncSession) - sessions_before < POLLS // 2
    assert _route_stacks() == 0
    [s] = await create(admin, resources={"gpu": 0.5})  # the node changes: every poll answers
    answers = await asyncio.gather(*polls)
    for r in answers:  # the answer is a route's: its body, its status, the version headers
        assert r.status_code == 200
        assert r.json()["version"] != version
        assert [a["session_id"] for a in r.json()["sessions"]] == [s["id"]]
        assert r.headers["content-type"] == "application/json"
        assert VERSION_HEADER.lower() in r.headers


async def test_a_long_poll_whose_agent_hung_up_delivers_nothing_through_the_api(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    # The parked wait asks the server whether its client is still there (past the request's
    # body, which the route has read): a hung-up agent's answer carries no request, which
    # waits for the next poll instead of being lost.
    agent, sid = await node_with_session(admin, make_agent)
    await agent.stop()
    waiting = await asked(app, agent.node_id, sid, timeout=60)  # in time for both polls
    sent: list[Message] = []
    incoming: list[Message] = [{"type": "http.request", "body": b"", "more_body": False},
                {"type": "http.disconnect"}]  # the agent is gone by the time it is answered

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # pragma: no cover - nothing more comes
        return {}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": "/api/v1/agents/me/assignments", "raw_path": b"",
             "query_string": b"wait=0", "root_path": "",
             "client": ("127.0.0.1", 1), "server": ("manager", 80),
             "headers": [(b"host", b"manager"),
                         (b"authorization", f"Bearer {agent.credential}".encode())]}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert b'"requests":[]' in body
    async with client_for(app, agent.credential) as again:
        [request] = (await again.get("/api/v1/agents/me/assignments",
                                     params={"wait": 0})).json()["requests"]
    assert request["session_id"] == sid
    waiting.cancel()


async def test_a_database_failure_while_parked_is_a_503_not_a_traceback(
    app: FastAPI, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await make_agent(auto_run=False)
    # What each database's driver raises when it cannot be used (db/faults.py knows both).
    fault = (Exception("database is locked")
             if app.state.settings.database_url.startswith("sqlite")
             else ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))

    async def down(*_args: Any, **_kwargs: Any) -> None:
        raise OperationalError("SELECT 1", {}, fault)

    monkeypatch.setattr(assignments, "long_poll", down)
    r = await agent.client.get("/api/v1/agents/me/assignments", params={"wait": 0})
    assert r.status_code == 503 and r.json()["code"] == "database_unavailable"
    assert VERSION_HEADER.lower() in r.headers


def _waits(raised: Exception | None) -> Any:
    async def route(_request: Request) -> Parked:
        async def wait(gone: Any) -> Any:
            assert await gone() is False
            if raised is not None:
                raise raised
            return JSONResponse({"waited": True})
        return Parked(wait)
    return route


@pytest.mark.parametrize("parking", [True, False], ids=["parked", "without-parking"])
async def test_parked_answers_and_errors_are_a_routes(parking: bool) -> None:
    # Without Parking around the app the wait runs in the route: the same answers either way.
    app = Starlette(routes=[
        Route("/ok", _waits(None)),
        Route("/missing", _waits(NotFound("no such thing"))),
        Route("/bug", _waits(RuntimeError("a bug"))),
    ], middleware=[Middleware(Parking)] if parking else [])
    app.state.settings = type("S", (), {"database_url": "sqlite://"})()
    async with client_for(app) as client:  # type: ignore[arg-type]
        assert (await client.get("/ok")).json() == {"waited": True}
        r = await client.get("/missing")
        assert (r.status_code, r.json()["code"]) == (404, "not_found")
        r = await client.get("/bug")
        assert (r.status_code, r.json()["code"]) == (500, "internal_error")
