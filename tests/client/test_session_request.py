"""The SDK sends the manager's own SessionCreate: its defaults, and its refusals before any
request leaves."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import ValidationError

from gpuslice.client.client import Client, session_request
from gpuslice.common.schemas.sessions import SessionCreate


def test_what_is_left_out_takes_the_schemas_defaults() -> None:
    assert session_request(image="x:1", name=None, gpu_mem=None) == SessionCreate(image="x:1")
    made = session_request(image="x:1", mem="512m", gpu="0.5", command=["true"])
    assert (made.resources.mem, made.resources.gpu, made.command) == (512 * 1024**2, 500,
                                                                      ["true"])


def test_a_refused_request_is_not_sent() -> None:
    sent: list[httpx.Request] = []
    client = Client("http://manager", "t", transport=httpx.MockTransport(sent.append))
    with pytest.raises(ValidationError, match="below the minimum 6 MiB"):
        client.create_sessions(image="x:1", mem="1k")
    assert sent == []


def test_the_body_is_the_schema_dumped() -> None:
    sent: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"fits_now": 1, "will_queue": 0, "reason": None,
                                         "queue_position": None, "fgpu_step": 0.01,
                                         "fgpu_per_gpu": [1], "max_gpu": 1, "largest_free": 1})

    client = Client("http://manager", "t", transport=httpx.MockTransport(answer))
    request = SessionCreate(image="x:1", count=2)
    client.preview_sessions(request)
    assert sent == [request.model_dump(mode="json")]
