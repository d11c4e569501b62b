"""The API's edge (issue 16, findings 1, 5 and 10): text, numbers and sizes are checked once,
before anything runs, and answered with a 422 / 413 naming what was wrong; stored data that
slipped through earlier never breaks a listing or a node's assignments."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from gpuslice.manager.db.models import SessionRow
from tests.manager.conftest import AgentFactory, Client, client_for, create
from tests.manager.helpers import wait_status
from tests.waits import scaled

SURROGATE = "\ud800"


def _refused(r: httpx.Response, field: str | None, needle: str, status: int = 422) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["field"] == field, body
    assert needle in body["message"], body["message"]


async def send(client: Client, method: str, path: str, body: Any) -> httpx.Response:
    """``body`` as JSON with every non-ASCII character escaped (``\\ud800`` as JSON writes a
    lone surrogate; httpx's own encoder refuses to)."""
    return await client.request(method, path, content=json.dumps(body).encode(),
                                headers={"content-type": "application/json"})


async def _total(client: Client) -> int:
    return int((await client.get("/api/v1/sessions")).json()["total"])


# ------------------------------------------------------------------ finding 1: lone surrogates


async def test_a_lone_surrogate_is_refused_before_anything_is_stored(admin: Client) -> None:
    before = await _total(admin)
    r = await send(admin, "POST", "/api/v1/sessions", {
        "image": "python:3.11", "type": "batch", "command": ["echo", SURROGATE],
    })
    _refused(r, "command.1", "lone surrogate (U+D800)")
    r = await send(admin, "POST", "/api/v1/sessions", {"image": "python:3.11",
                                                       "env": {"K": f"a{SURROGATE}"}})
    _refused(r, "env.K", "cannot be encoded as UTF-8")
    assert await _total(admin) == before  # nothing was stored
    assert (await admin.get("/api/v1/sessions")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/v1/sessions/destroy", {"ids": [SURROGATE]}, "ids.0"),
        ("PATCH", "/api/v1/users/{me}", {"policy_id": SURROGATE}, "policy_id"),
        ("POST", "/api/v1/policies", {"name": SURROGATE}, "name"),
        ("POST", "/api/v1/auth/login", {"username": SURROGATE, "password": "x"}, "username"),
        ("POST", "/api/v1/join-tokens", {"name": f"a{SURROGATE}"}, "name"),
        ("POST", "/api/v1/images/aliases", {"name": "x", "reference": SURROGATE}, "reference"),
    ],
)
async def test_lone_surrogates_anywhere_are_a_422(
    admin: Client, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    me = (await admin.get("/api/v1/auth/me")).json()["id"]
    r = await send(admin, method, path.format(me=me), body)
    _refused(r, field, "lone surrogate")


async def test_exec_with_a_lone_surrogate_never_reaches_the_node(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent()
    [s] = await create(admin)
    await wait_status(admin, s["id"], {"RUNNING"})
    r = await send(admin, "POST", f"/api/v1/sessions/{s['id']}/exec", {"command": [SURROGATE]})
    _refused(r, "command.0", "lone surrogate")
    assert agent.executed == []  # the node was never asked
    r = await admin.post(f"/api/v1/sessions/{s['id']}/exec", json={"command": ["true"]})
    assert r.status_code == 200, r.text  # and the node still works


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("a\x00b", "NUL"),
        ("a\x07b", "U+0007"),
        ("a\x7fb", "U+007F"),
        ("a\x85b", "U+0085"),
    ],
)
async def test_control_characters_where_they_make_no_sense(
    admin: Client, value: str, needle: str
) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": "python:3.11", "type": "batch",
                                                   "command": ["echo", value]})
    _refused(r, "command.1", needle)


async def test_tabs_and_newlines_are_text_but_not_names(admin: Client) -> None:
    await create(admin, type="batch", command=["python3", "-c", "print(1)\n\tprint(2)\r\n"])
    r = await admin.post("/api/v1/join-tokens", json={"name": "two\nlines"})
    _refused(r, "name", "no control characters are allowed here")
    r = await admin.get("/api/v1/sessions", params={"name": "a\tb"})
    _refused(r, "name", "U+0009")


async def test_bad_query_and_path_parameters_are_422_naming_them(admin: Client) -> None:
    r = await admin.get("/api/v1/sessions/abc%00def")
    _refused(r, "session_id", "NUL")
    r = await admin.get("/api/v1/sessions", params={"owner": "x" * 3000})
    _refused(r, "owner", "at most 2048")


async def test_stored_bad_text_never_breaks_a_listing_or_the_assignments(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    """Defence in depth: a row stored before the edge existed (or by a bug) is answered with
    U+FFFD in listings, and the node's assignments skip it and end it with the reason."""
    agent = await make_agent(auto_run=False)
    good, bad = await create(admin, count=2, type="batch", command=["echo", "ok"])
    async with app.state.sessionmaker() as db:
        await db.execute(update(SessionRow).where(SessionRow.id == bad["id"])
                         .values(command=["echo", SURROGATE], env={SURROGATE: "v"}))
        await db.commit()
    listed = await admin.get("/api/v1/sessions")
    assert listed.status_code == 200, listed.text
    shown = next(s for s in listed.json()["items"] if s["id"] == bad["id"])
    assert shown["command"] == ["echo", "\ufffd"] and shown["env"] == {"\ufffd": "v"}
    assert (await admin.get(f"/api/v1/sessions/{bad['id']}")).status_code == 200
    # The agent's long-poll may have been answered (with the row still clean) before the row
    # went bad: the next answer, at the latest when that poll's 5 s wait ends, ends it.
    ended = await wait_status(admin, bad["id"], {"ERROR"}, timeout=15)
    assert "cannot be sent to a node" in ended["status_reason"], ended["status_reason"]
    await wait_status(admin, good["id"], {"SCHEDULED"})
    r = await agent.client.get("/api/v1/agents/me/assignments")
    assert r.status_code == 200, r.text
    assert [a["session_id"] for a in r.json()["sessions"]] == [good["id"]]


# ------------------------------------------------------------------ finding 5: body size


@pytest.mark.parametrize("path", ["/api/v1/agents/register", "/api/v1/auth/login",
                                  "/api/v1/sessions", "/api/v1/nowhere"])
async def test_an_oversized_body_is_413_before_it_is_read_even_anonymously(
    anon: Client, path: str
) -> None:
    big = b'{"x": "' + b"a" * (2 * 1024**2) + b'"}'
    r = await anon.post(path, content=big, headers={"content-type": "application/json"})
    _refused(r, None, "larger than 1 MiB", status=413)
    assert r.json()["code"] == "too_large"


async def test_a_body_without_length_is_cut_at_the_limit(anon: Client) -> None:
    async def chunks() -> Any:
        for _ in range(64):
            yield b"a" * 65536

    r = await anon.post("/api/v1/auth/login", content=chunks())
    assert r.status_code == 413, r.text


async def test_node_routes_take_larger_bodies_only_with_a_credential(
    anon: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    logs = "x" * (3 * 1024**2)
    r = await agent.client.post("/api/v1/agents/me/sessions/nope/state",
                                json={"status": "RUNNING", "logs": logs})
    assert r.status_code == 422  # read and validated (logs too long for a report), not a 413
    r = await anon.post("/api/v1/agents/me/sessions/nope/state",
                        json={"status": "RUNNING", "logs": logs})
    assert r.status_code == 413


# ------------------------------------------------------------------ finding 10: integer range


async def test_integers_out_of_range_are_422(admin: Client, make_agent: AgentFactory) -> None:
    r = await admin.get("/api/v1/sessions", params={"offset": "9223372036854775808"})
    _refused(r, "offset", "out of range")
    r = await admin.get("/api/v1/sessions/events", params={"since": str(10**20)})
    _refused(r, "since", "out of range")
    r = await admin.get("/api/v1/sessions/events", params={"since": "1e20"})
    assert r.status_code == 422, r.text
    r = await admin.get("/api/v1/sessions/events", headers={"Last-Event-ID": str(10**20)})
    _refused(r, "last-event-id", "out of range")
    agent = await make_agent(auto_run=False)
    for body, field in (({"cpu": 10**30, "mem": 1}, "cpu"), ({"cpu": 1, "mem": 2**63}, "mem"),
                        ({"cpu": 2**62, "mem": 1}, "cpu")):
        r = await agent.client.post("/api/v1/agents/me/heartbeat", json=body)
        assert r.status_code == 422 and r.json()["field"] == field, r.text


async def test_huge_numbers_in_answers_and_reports_are_422(
    admin: Client, make_agent: AgentFactory
) -> None:
    agent = await make_agent(auto_run=False)
    [s] = await create(admin, type="batch", command=["true"])
    await wait_status(admin, s["id"], {"SCHEDULED"})
    r = await agent.report(s["id"], "TERMINATED", exit_code=2**40)
    assert r.status_code == 422 and r.json()["field"] == "exit_code", r.text
    r = await agent.client.post("/api/v1/agents/me/heartbeat", json={
        "cpu": 1000, "mem": 2**30,
        "image_details": [{"tag": "x:1", "image_id": "sha256:1", "size": 2**63 - 1}],
    })
    assert r.status_code == 422 and r.json()["field"] == "image_details.0.size", r.text
    r = await agent.client.post("/api/v1/agents/me/heartbeat", content=b'{"cpu": NaN}',
                                headers={"content-type": "application/json"})
    _refused(r, None, "not valid JSON")
    assert (await agent.report(s["id"], "RUNNING")).status_code == 200  # the node still works


async def test_deep_nesting_and_invalid_utf8_are_422(anon: Client) -> None:
    r = await anon.post("/api/v1/auth/login", content=b"[" * 100_000 + b"]" * 100_000)
    _refused(r, None, "nested")
    r = await anon.post("/api/v1/auth/login", content=b'{"username": "\xff"}')
    _refused(r, None, "not valid UTF-8")


async def test_everything_else_still_flows(app: FastAPI, admin: Client) -> None:
    """A long-poll still notices its agent hang up (the edge replays the body, then passes the
    client's disconnect on), and non-API paths are not the edge's business."""
    async with client_for(app) as plain:
        assert (await plain.get("/api/v1/openapi.json")).status_code == 200
        assert (await plain.get("/docs")).status_code == 200
    r = await asyncio.wait_for(admin.get("/api/v1/health"), scaled(5))
    assert r.json() == {"status": "ok"}
