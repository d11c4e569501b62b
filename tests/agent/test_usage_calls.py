"""The in-session endpoint's monitoring calls: the history relayed for the caller only, and on
mock nodes the simulated load of the calling process (known from the socket, not the body)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpuslice.agent import usage_calls
from gpuslice.agent.accelerators import MockAccelerator, NvidiaAccelerator
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.settings import MockGpu
from gpuslice.common.resources import GiB

from .endpoint_helpers import Data, Link, call
from .factories import container
from .fake_nvml import A100, FakeNVML


class Runtime:
    """Stands in for the Docker runtime: the containers' allocation labels."""

    def __init__(self, uuid: str) -> None:
        self.states = {"s1": container("s1", "a" * 64, {uuid: 4 * GiB}),
                       "cpu": container("cpu", "b" * 64, {})}

    async def find(self, session_id: str) -> Any:
        return self.states.get(session_id)


@pytest.fixture
async def mock_node(tmp_path: Path) -> AsyncIterator[tuple[SessionEndpoint, MockAccelerator]]:
    mock = MockAccelerator("n", [MockGpu(memory="8g")])
    served = SessionEndpoint(tmp_path, Data(), Link(), user="1000:1000")  # type: ignore[arg-type]
    usage_calls.register(served, mock, Runtime(mock.devices()[0].uuid))  # type: ignore[arg-type]
    await served.sync(["s1", "cpu"])
    yield served, mock
    await served.stop()


async def test_history_is_relayed_for_the_caller(
    mock_node: tuple[SessionEndpoint, MockAccelerator],
) -> None:
    endpoint, _ = mock_node
    assert await call(endpoint, "s1", "GET", "/v1/usage/history?since=2h&step=60") == (
        200, {"relayed_for": "s1"})
    assert endpoint.link.calls[-1] == (  # type: ignore[attr-defined]
        "s1", "GET", "usage?since=2h&step=60", None)
    status, answer = await call(endpoint, "s1", "GET", "/v1/usage/history?node=x")
    assert (status, answer["code"]) == (400, "bad_query") and "since, step" in answer["message"]


async def test_the_calling_process_declares_its_simulated_load(
    mock_node: tuple[SessionEndpoint, MockAccelerator],
) -> None:
    endpoint, mock = mock_node
    uuid = mock.devices()[0].uuid
    status, answer = await call(endpoint, "s1", "POST", "/v1/mock/gpu",
                                json={"mem_bytes": GiB, "utilization": 70})
    assert status == 200, answer
    assert answer == {"pid": os.getpid(), "device": uuid, "mem_bytes": GiB, "utilization": 70}
    [reading] = mock.usage()
    assert reading.process_utilization == {os.getpid(): 70} and reading.memory_used == GiB
    for body, code in (
        ({"mem_bytes": -1}, "invalid_load"), ({"utilization": 101}, "invalid_load"),
        ({"utilization": "80"}, "invalid_load"), ({"device": 3}, "invalid_load"),
        ({"mem_bytes": 9 * GiB}, "invalid_load"), ({"pid": 1, "utilization": 5}, None),
    ):
        status, answer = await call(endpoint, "s1", "POST", "/v1/mock/gpu", json=body)
        if code is None:  # a pid in the body is not how the caller is known: ignored
            assert status == 200 and answer["pid"] == os.getpid()
        else:
            assert (status, answer["code"]) == (422, code), body
    status, answer = await call(endpoint, "cpu", "POST", "/v1/mock/gpu", json={})
    assert (status, answer["code"]) == (409, "no_gpu")


async def test_real_gpu_nodes_have_no_simulated_load(tmp_path: Path) -> None:
    plugin, _ = NvidiaAccelerator.open(FakeNVML([A100]))
    assert plugin is not None
    served = SessionEndpoint(tmp_path, Data(), Link(), user="1000:1000")  # type: ignore[arg-type]
    usage_calls.register(served, plugin, Runtime("GPU-aaaa"))  # type: ignore[arg-type]
    try:
        await served.sync(["s1"])
        status, answer = await call(served, "s1", "POST", "/v1/mock/gpu", json={})
        assert (status, answer["code"]) == (404, "no_such_call")
        assert (await call(served, "s1", "GET", "/v1/usage/history"))[0] == 200
    finally:
        await served.stop()
