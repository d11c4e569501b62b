"""The agent's line to the manager: registration in wire units and the stored credential.

The manager is stood in for at the HTTP edge (``httpx.MockTransport``).
"""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gpuslice.agent.manager_link import (
    CREDENTIAL_FILE,
    Credential,
    InProcess,
    LinkError,
    ManagerLink,
    NotRegistered,
    registration,
)
from gpuslice.agent.settings import AgentSettings
from gpuslice.common.schemas.agents import ExecAnswer, Heartbeat, NodeRegister, StateReport
from gpuslice.common.schemas.sessions import SessionStatus

MANAGER = "http://manager.test"


class Registrar:
    """``POST /api/v1/agents/register``: records the bodies, hands out one credential."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/api/v1/agents/register")
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json={
            "node_id": "n-1", "credential": "gsn_secret", "heartbeat_interval_ms": 2500,
        })


@pytest.fixture
def registrar() -> Registrar:
    return Registrar()


@pytest.fixture
async def link(registrar: Registrar, tmp_path: Path) -> AsyncIterator[ManagerLink]:
    link = ManagerLink(MANAGER, tmp_path, transport=httpx.MockTransport(registrar))
    yield link
    await link.close()


def settings(**values: object) -> AgentSettings:
    return AgentSettings(node_name="lab-01", manager_url=MANAGER, **values)  # type: ignore[arg-type]


def test_registration_sends_fgpu_per_gpu_in_milli_fgpu() -> None:
    body = registration(settings(join_token="gsj_x", fgpu_per_gpu="2.5"))
    assert body == NodeRegister(join_token="gsj_x", name="lab-01", device_capacity=2500)
    assert json.loads(body.model_dump_json())["device_capacity"] == 2500
    default = registration(settings(join_token="gsj_x"))
    assert default is not None and default.device_capacity is None  # the manager's default
    assert registration(settings()) is None  # no token: only a stored credential can do


async def test_registering_stores_the_interval_in_ms(
    link: ManagerLink, registrar: Registrar, tmp_path: Path
) -> None:
    credential = await link.connect(registration(settings(join_token="gsj_x", fgpu_per_gpu=2)))
    assert (credential.node_id, credential.heartbeat_interval_ms) == ("n-1", 2500)
    assert registrar.bodies[0]["device_capacity"] == 2000
    path = tmp_path / CREDENTIAL_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "manager_url": MANAGER, "manager_urls": [MANAGER], "node_id": "n-1",
        "secret": "gsn_secret", "heartbeat_interval_ms": 2500,
    }


async def test_a_stored_credential_is_used_without_registering(
    link: ManagerLink, registrar: Registrar
) -> None:
    await link.connect(registration(settings(join_token="gsj_x")))
    again = await link.connect(None)
    assert again.heartbeat_interval_ms == 2500 and len(registrar.bodies) == 1


async def test_a_credential_file_from_before_milliseconds_still_works_and_is_upgraded(
    link: ManagerLink, registrar: Registrar, tmp_path: Path
) -> None:
    # an upgraded agent has no join token any more: it must not need one to keep its node
    path = tmp_path / CREDENTIAL_FILE
    old = {"manager_url": MANAGER, "node_id": "n-0", "secret": "gsn_old",
           "heartbeat_interval": 5.0}
    path.write_text(json.dumps(old))
    credential = await link.connect(None)
    assert (credential.node_id, credential.secret, credential.heartbeat_interval_ms) == (
        "n-0", "gsn_old", 5000
    )
    assert registrar.bodies == []
    assert json.loads(path.read_text())["heartbeat_interval_ms"] == 5000
    assert "heartbeat_interval" not in json.loads(path.read_text())


# ------------------------------------------------------------ several managers

OTHER = "http://manager-2.test"


class Replicas:
    """Two manager replicas behind one transport: ``down`` ones refuse connections, and
    ``status`` makes one answer that (a load balancer without a backend: 502/503)."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.status: dict[str, int] = {}
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"{request.url.scheme}://{request.url.host}"
        self.calls.append(host)
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if host in self.status:
            return httpx.Response(self.status[host], text="no server is available")
        if request.url.path.endswith("/register"):
            return httpx.Response(200, json={
                "node_id": "n-1", "credential": "gsn_secret", "heartbeat_interval_ms": 1000,
            })
        assert request.headers["Authorization"] == "Bearer gsn_secret"
        return httpx.Response(200, json={"node_id": "n-1", "status": "ALIVE",
                                         "assignment_version": 3})


def heartbeat() -> Heartbeat:
    return Heartbeat(cpu=1000, mem=1 << 30, devices=[])


async def test_a_dead_replica_is_left_for_the_next_one(tmp_path: Path) -> None:
    replicas = Replicas()
    link = ManagerLink(f"{MANAGER},{OTHER}", tmp_path, transport=httpx.MockTransport(replicas))
    try:
        await link.connect(registration(settings(join_token="gsj_x")))
        assert (await link.heartbeat(heartbeat())).assignment_version == 3
        replicas.down.add(MANAGER)
        with pytest.raises(LinkError, match="unreachable"):
            await link.heartbeat(heartbeat())
        assert link.manager_url == OTHER  # the loops' retry goes to the live one
        assert (await link.heartbeat(heartbeat())).assignment_version == 3
        assert replicas.calls[-1] == OTHER
    finally:
        await link.close()


async def test_two_calls_failing_together_move_on_once(tmp_path: Path) -> None:
    third = "http://manager-3.test"
    replicas = Replicas()
    arrived: list[str] = []

    async def in_flight_together(request: httpx.Request) -> httpx.Response:
        if replicas.down:  # the two heartbeats wait for each other, then both fail
            arrived.append(str(request.url))
            while len(arrived) % 2:
                await asyncio.sleep(0.001)
        return replicas(request)

    link = ManagerLink([MANAGER, OTHER, third], tmp_path,
                       transport=httpx.MockTransport(in_flight_together))
    try:
        await link.connect(registration(settings(join_token="gsj_x")))
        replicas.down.add(MANAGER)
        results = await asyncio.gather(link.heartbeat(heartbeat()), link.heartbeat(heartbeat()),
                                       return_exceptions=True)
        assert all(isinstance(r, LinkError) for r in results)
        assert link.manager_url == OTHER  # not skipped to the third
    finally:
        await link.close()


async def test_a_load_balancer_without_backend_counts_as_down(tmp_path: Path) -> None:
    replicas = Replicas()
    replicas.status[MANAGER] = 503
    link = ManagerLink([MANAGER, OTHER], tmp_path, transport=httpx.MockTransport(replicas))
    try:
        with pytest.raises(LinkError) as failed:
            await link.connect(registration(settings(join_token="gsj_x")))
        assert failed.value.status == 503
        assert (await link.connect(registration(settings(join_token="gsj_x")))).node_id == "n-1"
        assert link.manager_url == OTHER
    finally:
        await link.close()


async def test_the_credential_serves_every_replica_and_learns_new_ones(tmp_path: Path) -> None:
    replicas = Replicas()
    first = ManagerLink([MANAGER], tmp_path, transport=httpx.MockTransport(replicas))
    await first.connect(registration(settings(join_token="gsj_x")))
    await first.close()
    # a replica is added in front: the node keeps its identity without a join token
    second = ManagerLink([OTHER, MANAGER], tmp_path, transport=httpx.MockTransport(replicas))
    try:
        credential = await second.connect(None)
        assert credential.node_id == "n-1"
        stored = json.loads((tmp_path / CREDENTIAL_FILE).read_text())
        assert stored["manager_urls"] == [MANAGER, OTHER]
    finally:
        await second.close()
    # a cluster it never joined does not get its secret
    stranger = ManagerLink(["http://elsewhere.test"], tmp_path,
                           transport=httpx.MockTransport(replicas))
    try:
        with pytest.raises(NotRegistered, match="not registered with http://elsewhere.test"):
            await stranger.connect(None)
    finally:
        await stranger.close()


@pytest.mark.parametrize(("value", "expected"), [
    ("http://a:8080", ["http://a:8080"]),
    ("http://a:8080/, https://b:8443 ,http://a:8080", ["http://a:8080", "https://b:8443"]),
    (["http://a:8080", "http://b:8080"], ["http://a:8080", "http://b:8080"]),
])
def test_manager_url_takes_several_replicas(value: object, expected: list[str]) -> None:
    assert settings_with(value).manager_urls == expected


@pytest.mark.parametrize("value", ["a:8080", "http://a:8080,ftp://b", " , "])
def test_a_bad_manager_url_is_named(value: str) -> None:
    with pytest.raises(ValueError, match="manager_url"):
        settings_with(value)


def settings_with(manager_url: object) -> AgentSettings:
    return AgentSettings(node_name="lab-01", manager_url=manager_url)  # type: ignore[arg-type]
async def test_program_output_is_sent_as_text_the_manager_accepts(tmp_path: Path) -> None:
    sent: list[bytes] = []

    def manager(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(204)

    link = ManagerLink(MANAGER, tmp_path, transport=httpx.MockTransport(manager))
    link.credential = Credential(MANAGER, "n-1", "gsn_x", 1000)
    try:
        await link.answer("r-1", ExecAnswer(stdout="ok\x00\x07\x1b[1mbold\x1b[0m\tend\n"))
    finally:
        await link.close()
    assert json.loads(sent[0])["stdout"] == "ok\ufffd\ufffd\x1b[1mbold\x1b[0m\tend\n"


async def test_a_session_the_agent_cannot_read_is_left_out_and_named(tmp_path: Path) -> None:
    good = {"session_id": "s-1", "name": "a", "owner": "alice", "image": "x:1",
            "type": "interactive", "command": None, "env": {}, "status": "SCHEDULED",
            "desired": "running", "resources": {"gpu": 0, "cpu": 100, "mem": 1}, "slices": []}
    bad = {**good, "session_id": "s-2", "resources": {"gpu": -5}}

    def manager(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"node_id": "n-1", "version": 3,
                                         "sessions": [good, bad]})

    link = ManagerLink(MANAGER, tmp_path, transport=httpx.MockTransport(manager))
    link.credential = Credential(MANAGER, "n-1", "gsn_x", 1000)
    try:
        desired, unreadable = await link.assignments(None, 0)
    finally:
        await link.close()
    assert [a.session_id for a in desired.sessions] == ["s-1"] and desired.version == 3
    assert [u.session_id for u in unreadable] == ["s-2"]
    assert "resources" in unreadable[0].reason


async def test_in_process_calls_reach_the_app_and_a_hung_one_times_out(tmp_path: Path) -> None:
    """`up`'s agent calls its manager's app in the process: the same requests and answers; a
    call the app does not answer within its read timeout fails as on a socket, and an error
    the app raises is its 500."""
    seen: list[tuple[str, str, bytes]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append((str(scope["method"]), str(scope["path"]), body))
        if scope["path"] == "/api/v1/agents/me/heartbeat" and b'"cpu": 7,' in body:
            await asyncio.sleep(30)  # hangs
        if scope["path"] == "/api/v1/agents/me/sessions/s-1/state":
            raise RuntimeError("a bug in a route")
        answer = json.dumps({"node_id": "n-1", "credential": "gsn_secret",
                             "heartbeat_interval_ms": 2500, "assignment_version": 4,
                             "status": "ALIVE"}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    link = ManagerLink(MANAGER, tmp_path, transport=InProcess(app), timeout=0.3)
    try:
        await link.connect(registration(settings(join_token="gsj_x")))
        assert (await link.heartbeat(heartbeat())).assignment_version == 4
        assert seen[-1][:2] == ("POST", "/api/v1/agents/me/heartbeat")
        with pytest.raises(LinkError, match="unreachable.*ReadTimeout"):
            await link.heartbeat(Heartbeat(cpu=7, mem=1 << 30, devices=[]))
        with pytest.raises(LinkError) as failed:
            await link.report("s-1", StateReport(status=SessionStatus.RUNNING))
        assert failed.value.status == 500

        async def slow_file() -> AsyncIterator[bytes]:  # longer than the timeout, moving
            for _ in range(5):
                await asyncio.sleep(0.1)
                yield b"x" * 10

        # a streamed body renews the timeout with each piece, as a socket's reads do
        async with httpx.AsyncClient(transport=InProcess(app), timeout=0.3) as client:
            answer = await client.put(f"{MANAGER}/api/v1/agents/me/sessions/s-2/models/m/f",
                                      content=slow_file())
        assert answer.status_code == 200
        assert seen[-1] == ("PUT", "/api/v1/agents/me/sessions/s-2/models/m/f", b"x" * 50)
    finally:
        await link.close()
