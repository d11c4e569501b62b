"""Terminals and apps on the agent's side: stream requests dispatched without an answer,
unknown request kinds skipped, and, against the real Docker Engine, terminals (a TTY exec that
outlives its stream) and apps (started on first use, with their states)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import aiohttp
import httpx
import pytest
from aiohttp import web as aioweb

from gpuslice.agent.manager_link import Credential, ManagerLink
from gpuslice.agent.requests import RequestContext, RequestRunner
from gpuslice.agent.runtime import ContainerSpec, DockerRuntime
from gpuslice.agent.streams.apps import Addresses, AppSupervisor
from gpuslice.agent.streams.http import Upstream
from gpuslice.agent.streams.link import serve_link
from gpuslice.agent.streams.memory import pipe
from gpuslice.agent.streams.tcp import Tunnels
from gpuslice.agent.streams.terminals import Terminals
from gpuslice.common.schemas.agents import (
    AgentRequest,
    AppLaunch,
    AppsAnswer,
    AppsAsk,
    AppState,
    AppStatus,
    StreamAsk,
)
from gpuslice.common.schemas.streams import OpenHttp
from tests.waits import scaled

MANAGER = "http://manager.test"


# ---------------------------------------------------------------- dispatch (no Docker)


class StandInStreams:
    def __init__(self) -> None:
        self.opened: list[tuple[str, str, StreamAsk]] = []

    async def open_link(self, request_id: str, session_id: str, ask: StreamAsk) -> None:
        self.opened.append((request_id, session_id, ask))

    async def states(self, session_id: str, ask: AppsAsk) -> AppsAnswer:
        return AppsAnswer(apps=[AppStatus(name=a.name, state=AppState.READY) for a in ask.apps])


def runner(puts: list[str], streams: object | None) -> RequestRunner:
    def manager(request: httpx.Request) -> httpx.Response:
        puts.append(request.content.decode())
        return httpx.Response(204)

    link = ManagerLink(MANAGER, Path("/nonexistent"), transport=httpx.MockTransport(manager))
    link.credential = Credential(MANAGER, "node-1", "gsn_node", 5000)
    return RequestRunner(RequestContext(
        runtime=None, link=link, say=lambda _: None,  # type: ignore[arg-type]
        images_changed=lambda: None, streams=streams,  # type: ignore[arg-type]
    ))


async def test_a_stream_request_is_dialled_back_not_answered() -> None:
    puts: list[str] = []
    streams = StandInStreams()
    ask = StreamAsk(manager_url="http://replica-2:8080", idle_ms=5000)
    await runner(puts, streams).serve(AgentRequest(id="r-1", session_id="s-1", ask=ask))
    assert streams.opened == [("r-1", "s-1", ask)] and puts == []

    launch = AppLaunch(name="web", port=80)
    await runner(puts, streams).serve(
        AgentRequest(id="r-2", session_id="s-1", ask=AppsAsk(apps=[launch])))
    assert json.loads(puts[0])["apps"][0]["state"] == "ready"
    await runner(puts, None).serve(
        AgentRequest(id="r-3", session_id="s-1", ask=AppsAsk(apps=[launch])))
    assert json.loads(puts[1])["error"] == "no app states: this agent serves no streams"


async def test_requests_of_unknown_kinds_are_skipped_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    answer = {
        "node_id": "n-1", "version": 7, "sessions": [],
        "requests": [
            {"id": "r-new", "session_id": "s-1", "ask": {"kind": "teleport", "to": "mars"}},
            {"id": "r-logs", "session_id": "s-1", "ask": {"kind": "logs", "tail": 5}},
        ],
    }
    link = ManagerLink(MANAGER, tmp_path, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=answer)))
    link.credential = Credential(MANAGER, "n-1", "gsn_node", 5000)
    try:
        got, _unreadable = await link.assignments(None, 1)
    finally:
        await link.close()
    assert got.version == 7 and [r.id for r in got.requests] == ["r-logs"]
    assert "request r-new of kind 'teleport' is not one this agent serves" in caplog.text


# ---------------------------------------------------------------- an app's URL (no Docker)


class _Ready:
    """Addresses and supervisor of a session whose app is up, at this machine's loopback."""

    async def of(self, session_id: str, *, fresh: bool = False) -> str:
        return "127.0.0.1"

    def ready(self, session_id: str, launch: AppLaunch) -> bool:
        return True


async def _asked(request: aioweb.Request) -> aioweb.Response:
    request.app[ASKED].append(request.raw_path)
    return aioweb.Response(text="answered")


ASKED = aioweb.AppKey("asked", list[str])


@pytest.fixture
async def two_apps() -> AsyncIterator[tuple[int, int, list[str], list[str]]]:
    """The session's app, and another server the node reaches (the metadata service, another
    session's app): their ports and the raw paths each was asked for."""
    ports, asked, runners = [], [], []
    for _ in range(2):
        server = aioweb.Application()
        server[ASKED] = []
        server.router.add_route("*", "/{tail:.*}", _asked)
        runner = aioweb.AppRunner(server)
        await runner.setup()
        site = aioweb.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.append(runner.addresses[0][1])
        asked.append(server[ASKED])
        runners.append(runner)
    yield ports[0], ports[1], asked[0], asked[1]
    for runner in runners:
        await runner.cleanup()


async def test_an_app_is_asked_for_a_path_on_its_own_address_only(
    two_apps: tuple[int, int, list[str], list[str]]
) -> None:
    """Security review F6: a target pasted after ``host:port`` (``@127.0.0.1:<other>/…``)
    made the URL another host's, which the agent asked and answered from."""
    app_port, other_port, app_asked, other_asked = two_apps
    launch = AppLaunch(name="web", port=app_port)
    ready = _Ready()
    async with aiohttp.ClientSession() as client:
        upstream = Upstream(cast(Addresses, ready), cast(AppSupervisor, ready), client)
        replies = []
        for target in (f"@127.0.0.1:{other_port}/secret", f"http://127.0.0.1:{other_port}/",
                       "/a%2Fb/../c?x=%2F&y", "/caf\xe9 x"):
            manager_end, agent_end = pipe()
            serving = asyncio.create_task(serve_link(
                agent_end, "s-1", upstream, cast(Terminals, None), cast(Tunnels, None),
                idle=5, ping=20))
            await manager_end.send_text(OpenHttp(app=launch, method="GET", target=target,
                                                 whole=1024).model_dump_json())
            async with asyncio.timeout(scaled(10)):
                message = await manager_end.receive()
                await manager_end.close()
                await serving
            replies.append(message.get("text") or message["bytes"].partition(b"\n")[0])
    for refused in replies[:2]:
        failed = json.loads(refused)
        assert (failed["op"], failed["status"], failed["code"]) == ("failed", 400, "bad_target")
        assert "is not a path: an app is asked for a path starting with /" in failed["message"]
    assert [json.loads(r)["status"] for r in replies[2:]] == [200, 200]
    assert other_asked == []  # never reached
    # the path and query as asked (none of them resolved or decoded), other bytes escaped
    assert app_asked == ["/a%2Fb/../c?x=%2F&y", "/caf%E9%20x"]


# ---------------------------------------------------------------- terminals (Docker)


class Collected:
    """A terminal's stream, as a test sees it."""

    def __init__(self) -> None:
        self.data = b""
        self.exit_code: int | None = None
        self._more = asyncio.Event()

    async def output(self, data: bytes) -> None:
        self.data += data
        self._more.set()

    async def exited(self, code: int) -> None:
        self.exit_code = code
        self._more.set()

    async def until(self, pattern: bytes, timeout: float = 30) -> re.Match[bytes]:
        async with asyncio.timeout(scaled(timeout)):
            while (found := re.search(pattern, self.data)) is None:
                self._more.clear()
                await self._more.wait()
        return found


@pytest.fixture
async def session(runtime: DockerRuntime, make_spec: Callable[..., ContainerSpec]) -> str:
    spec = make_spec()
    await runtime.ensure_running(spec)
    return spec.session_id


async def test_a_terminal_outlives_its_stream_then_ends(runtime: DockerRuntime,
                                                        session: str) -> None:
    terminals = Terminals(runtime)
    try:
        term, resumed = await terminals.open(session, None, 30, 100)
        assert not resumed
        first = Collected()
        await term.attach(first)
        await term.write(b"stty size; printf 'pid=%s.\\n' $$\n")
        pid = (await first.until(rb"pid=(\d+)\.")).group(1)
        assert b"30 100" in first.data
        term.detach(first, keep=30)

        again, resumed = await terminals.open(session, term.id, 40, 120)
        assert resumed and again is term
        second = Collected()
        await again.attach(second)
        assert b"pid=" + pid in second.data  # the recent output, replayed first
        await again.write(b"stty size; printf 'then=%s.\\n' $$\n")
        assert (await second.until(rb"then=(\d+)\.")).group(1) == pid
        assert b"40 120" in second.data

        again.detach(second, keep=0.2)  # nobody comes back: SIGHUP, the shell ends
        async with asyncio.timeout(scaled(10)):
            await term.ended.wait()
        fresh, resumed = await terminals.open(session, term.id, 24, 80)
        assert not resumed and fresh.id != term.id
        out = Collected()
        await fresh.attach(out)
        await fresh.write(b"exit 5\n")
        async with asyncio.timeout(scaled(10)):
            await fresh.ended.wait()
        assert out.exit_code == 5
    finally:
        await terminals.close()


# ---------------------------------------------------------------- apps (Docker)


def web(name: str, port: int, command: list[str], timeout_ms: int = 30_000) -> AppLaunch:
    return AppLaunch(name=name, port=port, command=command, start_timeout_ms=timeout_ms)


async def test_apps_start_on_first_use_and_say_how_they_failed(runtime: DockerRuntime,
                                                               session: str) -> None:
    apps = AppSupervisor(runtime, Addresses(runtime))
    server = web("web", 8000, ["python3", "-m", "http.server", "8000"])
    try:
        assert (await apps.status(session, server)).state is AppState.STOPPED
        both = await asyncio.gather(apps.ensure(session, server), apps.ensure(session, server))
        assert [s.state for s in both] == [AppState.READY, AppState.READY]
        assert await count(runtime, session, "http.server 8000") == 1  # one start, two waiters
        assert (await apps.status(session, server)).state is AppState.READY

        slow = web("slow", 8001, ["sh", "-c", "sleep 2; exec python3 -m http.server 8001"])
        assert (await apps.ensure(session, slow)).state is AppState.READY  # slow, not failed

        broken = await apps.ensure(session, web(
            "broken", 8002, ["sh", "-c", "echo reading; echo 'oops: no config' >&2; exit 3"]))
        assert (broken.state, broken.exit_code) == (AppState.FAILED, 3)
        assert "oops: no config" in broken.logs and "reading" in broken.logs
        assert broken.message == "broken exited with code 3"

        silent = await apps.ensure(session, web("silent", 8003, ["sleep", "300"], 1000))
        assert silent.state is AppState.FAILED
        assert silent.message == "silent did not answer on port 8003 within 1 s; it was stopped"
        async with asyncio.timeout(scaled(10)):
            while await count(runtime, session, "sleep 300"):
                await asyncio.sleep(0.2)

        unstartable = await apps.ensure(session, AppLaunch(name="db", port=5432))
        assert unstartable.state is AppState.STOPPED
        assert "says no command to start it" in unstartable.message
    finally:
        await apps.close()


async def count(runtime: DockerRuntime, session: str, command: str) -> int:
    """How many processes of the session run ``command``."""
    script = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
    listed = await runtime.exec(session, ["sh", "-c", script])
    return sum(1 for line in listed.stdout.splitlines() if command in line)
