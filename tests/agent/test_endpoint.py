"""The in-session endpoint: one socket per session says who calls; sessions use it from inside."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpuslice.agent import endpoint as endpoint_module
from gpuslice.agent.endpoint import EndpointCall, EndpointError, SessionEndpoint
from gpuslice.agent.manager_link import LinkError
from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.spec import DeviceInfo, SessionSpec, SpecOptions, build_container_spec
from gpuslice.common.resources import GiB
from tests.agent.endpoint_helpers import Data, Link, call
from tests.agent.factories import gpu_slice


@pytest.fixture
async def endpoint(tmp_path: Path) -> AsyncIterator[SessionEndpoint]:
    served = SessionEndpoint(tmp_path, Data(), Link(), user="1000:1000")  # type: ignore[arg-type]
    yield served
    await served.stop()


async def test_the_socket_says_which_session_calls(endpoint: SessionEndpoint) -> None:
    await endpoint.sync(["s1", "s2"])
    assert (await call(endpoint, "s1", "GET", "/v1/session"))[1]["session_id"] == "s1"
    assert (await call(endpoint, "s2", "GET", "/v1/session"))[1]["session_id"] == "s2"
    assert await call(endpoint, "s1", "GET", "/v1/usage") == (
        200, {"session_id": "s1", "cpu": 250, "mem": 1024}
    )
    status, answer = await call(endpoint, "s2", "GET", "/v1/usage")
    assert (status, answer["code"]) == (404, "not_measured")


async def test_a_call_claiming_another_session_is_refused(endpoint: SessionEndpoint) -> None:
    await endpoint.sync(["s1", "s2"])
    for kw in ({"params": {"session_id": "s2"}}, {"headers": {"X-Gpuslice-Session": "s2"}},
               {"json": {"session_id": "s2"}}):
        status, answer = await call(endpoint, "s1", "GET", "/v1/session", **kw)
        assert (status, answer["code"]) == (403, "wrong_session"), kw
        assert "only for session s1" in answer["message"]
    status, _ = await call(endpoint, "s1", "GET", "/v1/session", params={"session_id": "s1"})
    assert status == 200  # naming oneself is fine


async def test_added_calls_relay_for_the_calling_session_only(
    endpoint: SessionEndpoint,
) -> None:
    async def presign(call: EndpointCall) -> Any:
        if "name" not in call.body:
            raise EndpointError(422, "invalid", "name: required")
        return await call.relay("POST", "models/presign", {"name": call.body["name"]})

    endpoint.route("POST", "/v1/models/presign", presign)
    await endpoint.sync(["s1"])
    assert await call(endpoint, "s1", "POST", "/v1/models/presign", json={"name": "m"}) == (
        200, {"relayed_for": "s1"}
    )
    assert endpoint.link.calls == [("s1", "POST", "models/presign", {"name": "m"})]  # type: ignore[attr-defined]
    status, answer = await call(endpoint, "s1", "POST", "/v1/models/presign", json={})
    assert (status, answer["message"]) == (422, "name: required")
    status, answer = await call(endpoint, "s1", "POST", "/v1/models/presign", data=b"[1")
    assert (status, answer["code"]) == (400, "bad_json")
    status, answer = await call(endpoint, "s1", "GET", "/v1/nope")
    assert status == 404 and "POST /v1/models/presign" in answer["message"]


async def test_sync_closes_the_sockets_of_gone_sessions(endpoint: SessionEndpoint) -> None:
    await endpoint.sync(["s1", "s2"])
    await endpoint.sync(["s2"])
    assert not endpoint.socket_path("s1").exists()
    assert endpoint.socket_path("s2").is_socket()
    endpoint.socket_path("s2").unlink()  # a stale file (an agent killed) is replaced on open
    await endpoint.close("s2")
    await endpoint.open("s2")
    assert (await call(endpoint, "s2", "GET", "/v1/session"))[0] == 200


async def test_closing_a_socket_leaves_the_event_loop_free(
    endpoint: SessionEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Closing the directory's descriptor waits in the kernel (milliseconds a session at full
    # throughput): never on the event loop's thread, which serves every session meanwhile.
    await endpoint.open("s1")
    directory = endpoint._sites["s1"].directory
    closed_on: list[threading.Thread] = []
    close = os.close

    def watched(fd: int) -> None:
        if fd == directory:
            closed_on.append(threading.current_thread())
        close(fd)

    monkeypatch.setattr(os, "close", watched)
    await endpoint.close("s1")
    assert closed_on and closed_on[0] is not threading.main_thread()
    assert not endpoint.socket_path("s1").exists()


@pytest.mark.docker
async def test_a_session_reaches_its_endpoint_and_sees_its_slice(
    runtime: DockerRuntime, base_image: str
) -> None:
    served = SessionEndpoint(runtime.files_root, Data(), Link(), user="1000:1000")  # type: ignore[arg-type]
    session = SessionSpec(
        session_id="endpoint-test-1", owner="alice", image=base_image, type="interactive",
        cpu=500, mem=256 * 1024**2, device_capacity=2000,
        slices=(gpu_slice("GPU-mock-0", 0, 1000, 4 * GiB, 54, capacity=2000),),
    )
    options = SpecOptions(node_name=runtime.node_name, accelerator="mock",
                          devices={"GPU-mock-0": DeviceInfo("Mock GPU", 8 * GiB)})
    spec = build_container_spec(session, options)
    try:
        await served.open(spec.session_id)
        await runtime.ensure_running(spec)
        whoami = await runtime.exec(spec.session_id, [
            "python3", "-c",
            "import json, gpuslice_endpoint as e; print(json.dumps(e.call('GET', '/v1/session')))",
        ])
        assert whoami.exit_code == 0, whoami.stderr
        assert json.loads(whoami.stdout)["session_id"] == spec.session_id
        smi = await runtime.exec(spec.session_id, ["nvidia-smi"])  # on PATH, simulated
        assert smi.exit_code == 0, smi.stderr
        assert "Simulated GPU" in smi.stdout and "Mock GPU (8 GiB)" in smi.stdout
        assert "/ 4096 MiB" in smi.stdout and "1.0 fGPU = 50%" in smi.stdout
        query = await runtime.exec(spec.session_id, [
            "nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv"])
        assert query.exit_code == 0, query.stdout + query.stderr  # issue 34: it exited 2
        assert query.stdout.splitlines() == ["memory.used [MiB], memory.total [MiB]",
                                             "[N/A], 4096 MiB"]  # Data measured no GPU
        listed = await runtime.exec(spec.session_id, ["gpuslice-smi", "-L"])
        assert listed.stdout.startswith("GPU 0: Mock GPU (UUID: GPU-mock-0)")
        other = await runtime.exec(spec.session_id, [
            "python3", "-c",
            "import gpuslice_endpoint as e; e.call('GET', '/v1/session?session_id=someone')",
        ])
        assert other.exit_code != 0 and "only for session endpoint-test-1" in other.stderr
        owner = await runtime.exec(
            spec.session_id, ["stat", "-c", "%u %a", "/run/gpuslice/agent.sock"]
        )
        assert owner.stdout.split() == ["1000", "600"]  # only the session's user connects
    finally:
        await served.stop()


class AwayLink:
    """A manager link whose manager cannot be reached for the first ``away`` calls (as while
    it restarts), then answers; or refuses every call with ``status``."""

    def __init__(self, away: int, status: int = 0) -> None:
        self.away, self.status, self.calls = away, status, 0

    async def session_call(self, session_id: str, method: str, path: str, body: Any) -> Any:
        self.calls += 1
        if self.status:
            raise LinkError("no such model", self.status)
        if self.calls <= self.away:
            raise LinkError("manager http://m unreachable: ConnectError()")
        return {"saved": True}


async def test_a_relay_waits_for_a_manager_that_comes_back_and_never_for_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 35, finding 4: a relayed call failed at once while the manager restarted.
    back = AwayLink(away=3)
    call = EndpointCall("s1", {}, {}, back)  # type: ignore[arg-type]
    assert await call.relay("POST", "models/complete", {}) == {"saved": True}
    assert back.calls == 4
    refused = AwayLink(away=0, status=404)
    with pytest.raises(EndpointError) as caught:
        await EndpointCall("s1", {}, {}, refused).relay("POST", "x")  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.code, refused.calls) == (404, "manager_refused", 1)
    monkeypatch.setattr(endpoint_module, "RELAY_PATIENCE", 1.0)
    gone = AwayLink(away=10**6)
    with pytest.raises(EndpointError) as caught:
        await EndpointCall("s1", {}, {}, gone).relay("POST", "x")  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.code) == (502, "manager_unreachable")
    assert 1 < gone.calls < 10
