"""The status stream (SSE) over a real HTTP server: one sees one's own changes, in order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gpuslice.manager.services.sessions import stream
from tests.manager.conftest import AgentFactory, Client, UserFactory, create
from tests.waits import await_for, scaled


async def _events(
    base_url: str, token: str, want: int, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=10) as client,
        client.stream("GET", "/api/v1/sessions/events", params=params or {}) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                found.append(json.loads(line.removeprefix("data:").strip()))
                if len(found) >= want:
                    return found
    return found


async def test_stream_follows_status_changes(
    base_url: str, admin: Client, make_user: UserFactory, make_agent: AgentFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_agent()
    alice, bob = await make_user("alice"), await make_user("bob")
    token = alice.headers["Authorization"].split()[1]
    waits = 0  # the streams' waits for news begun so far: hers is the only stream
    real_wait = stream.wait_event

    async def counted(event: asyncio.Event, timeout: float) -> bool:
        nonlocal waits
        waits += 1
        return await real_wait(event, timeout)

    monkeypatch.setattr(stream, "wait_event", counted)
    reader = asyncio.create_task(_events(base_url, token, want=4))

    async def following() -> bool:  # "from now on" is fixed: what follows reaches her
        assert not reader.done(), reader
        return waits > 0

    await await_for(following, 30, "the stream open and waiting for news")
    await create(bob)  # not hers: never in her stream
    [s] = await create(alice, resources={"gpu": 0.5})
    events = await asyncio.wait_for(reader, scaled(5))
    assert {e["session_id"] for e in events} == {s["id"]}
    assert [e["status"] for e in events] == ["PENDING", "SCHEDULED", "PREPARING", "RUNNING"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)

    # Resuming after an event id replays what followed it.
    replay = await asyncio.wait_for(
        _events(base_url, token, want=2, params={"since": events[1]["id"]}), scaled(5)
    )
    assert [e["status"] for e in replay] == ["PREPARING", "RUNNING"]
