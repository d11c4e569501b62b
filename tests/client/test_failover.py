"""The SDK in front of several replicas: a balancer's error page and a stream that breaks."""

from __future__ import annotations

import json

import httpx
import pytest

from gpuslice.client import ApiError, Client


def _change(event_id: int, status: str) -> str:
    body = {"id": event_id, "session_id": "s-1", "from_status": None, "status": status,
            "reason": "", "at": "2026-01-01T00:00:00Z"}
    return f"event: status\nid: {event_id}\ndata: {json.dumps(body)}\n\n"


def test_a_balancer_page_is_one_sentence() -> None:
    page = "<html><body><h1>503 Service Unavailable</h1>No server is available</body></html>"
    transport = httpx.MockTransport(lambda _r: httpx.Response(503, text=page))
    with Client("http://lb.test", "gsu_x", transport=transport) as client:
        with pytest.raises(ApiError) as failed:
            client.me()
    assert failed.value.code == "unreachable"
    assert str(failed.value.message) == ("no manager answered behind lb.test (HTTP 503 from the "
                                         "proxy in front of it); try again in a moment")


def test_a_broken_event_stream_resumes_after_its_last_event() -> None:
    asked: list[str | None] = []

    def replicas(request: httpx.Request) -> httpx.Response:
        since = request.url.params.get("since")
        asked.append(since)
        if len(asked) == 1:  # the first replica sends two events, then dies mid-stream
            return httpx.Response(200, content=_change(1, "PENDING") + _change(2, "SCHEDULED"))
        if len(asked) == 2:  # the balancer has not noticed yet
            return httpx.Response(502, text="<html>Bad Gateway</html>")
        return httpx.Response(200, content=_change(3, "RUNNING"))

    with Client("http://lb.test", "gsu_x", transport=httpx.MockTransport(replicas)) as client:
        seen = []
        for change in client.events(reconnect=5):
            seen.append((change.id, change.status.value))
            if len(seen) == 3:
                break
    assert seen == [(1, "PENDING"), (2, "SCHEDULED"), (3, "RUNNING")]
    assert asked == [None, "2", "2"]  # resumed after event 2, none missed or repeated
