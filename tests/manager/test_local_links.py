"""Links to an agent in the manager's own process (`gpuslice up`): in memory, with no channel
request and no dial-back, served by the real agent's link code (``agent/streams/link.py``)
reaching a real HTTP server. The node's fake agent never dials back, so any request that took
the dialled path would end in a 504."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from typing import cast

import aiohttp
import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI

from gpuslice.agent.streams.apps import Addresses, AppSupervisor
from gpuslice.agent.streams.http import Upstream
from gpuslice.agent.streams.link import serve_link
from gpuslice.agent.streams.memory import ManagerEnd, pipe
from gpuslice.agent.streams.ports import SessionPorts
from gpuslice.agent.streams.tcp import Tunnels
from gpuslice.agent.streams.terminals import Terminals
from gpuslice.client.errors import ApiError
from gpuslice.client.tunnel import Tunnel, tunnel_url
from gpuslice.common.schemas.agents import AppLaunch
from gpuslice.common.schemas.streams import OpenHttp
from gpuslice.manager.proxy.http import SMALL
from tests.manager.fake_agent import FakeAgent
from tests.manager.proxy_helpers import node, on, running, settings, token_of, url  # noqa: F401
from tests.ports import free_port
from tests.waits import scaled

MiB = 1024 * 1024
READ_BUFSIZE = 2**18  # as the agent's own client (StreamService.client)


class _Upstream(Upstream):
    """The real agent's upstream, pointed at the test's server; notes each session asked."""

    asked: list[str]
    port: int

    async def url(self, session_id: str, app: AppLaunch, target: str, scheme: str) -> str:
        self.asked.append(session_id)
        return f"{scheme}://127.0.0.1:{self.port}{target}"


class _Here:
    """Where the agent finds a session's ports (Docker's answer, in the real agent): this
    machine, outside any namespace."""

    async def of(self, session_id: str, *, fresh: bool = False) -> str:
        return "127.0.0.1"

    async def pid_of(self, session_id: str) -> None:
        return None


class LocalAgent:
    """What `gpuslice up`'s agent offers the pool (``StreamService.open_local``), serving
    each link with the agent's own ``serve_link``."""

    def __init__(self, client: aiohttp.ClientSession, port: int) -> None:
        self.client, self.port = client, port
        self.opened: list[str] = []  # the session of each link, as the pool named it
        self.asked: list[str] = []  # the session each exchange was served for
        self.tasks: set[asyncio.Task[None]] = set()
        here = _Here()
        self.tunnels = Tunnels(cast(Addresses, here), cast(SessionPorts, here))

    def open_local(self, session_id: str, idle: float, ping: float) -> ManagerEnd:
        manager_end, agent_end = pipe()
        self.opened.append(session_id)
        upstream = _Upstream(cast(Addresses, None), cast(AppSupervisor, None), self.client)
        object.__setattr__(upstream, "asked", self.asked)
        object.__setattr__(upstream, "port", self.port)
        serving = serve_link(agent_end, session_id, upstream, cast(Terminals, None),
                             self.tunnels, idle=idle, ping=ping)
        task = asyncio.create_task(serving)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return manager_end


_WRITERS = {"ended": 0, "cut": 0}  # /bytes answers ended, and those cut off by the reader


async def _bytes(request: web.Request) -> web.StreamResponse:
    size = int(request.query["n"])
    response = web.StreamResponse(headers={"Content-Length": str(size)})
    await response.prepare(request)
    block = bytes(range(256)) * 4096  # 1 MiB
    try:
        while size:
            await response.write(block[:min(size, len(block))])
            size -= min(size, len(block))
    except ConnectionError:
        _WRITERS["cut"] += 1
        raise
    finally:
        _WRITERS["ended"] += 1
    return response


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def _where(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path_qs})


@pytest.fixture
async def local(app: FastAPI, url: str, admin: httpx.AsyncClient,  # noqa: F811
                app_port: int) -> AsyncIterator[tuple[LocalAgent, FakeAgent]]:
    """The node's agent in the manager's process; its fake twin never dials back."""
    silent = await node(app, admin, url, dials=False)
    async with aiohttp.ClientSession(read_bufsize=READ_BUFSIZE) as client:
        agent = LocalAgent(client, app_port)
        app.state.links.local(silent.node_id, agent)
        try:
            yield agent, silent
        finally:
            app.state.links.local(silent.node_id, None)
            await silent.stop()
            for task in list(agent.tasks):
                task.cancel()
            await asyncio.gather(*agent.tasks, return_exceptions=True)


async def _echo_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(MiB):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A TCP echo server: what it reads it writes back, and closes at the client's end."""
    server = await asyncio.start_server(_echo_conn, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
async def app_port() -> AsyncIterator[int]:
    _WRITERS.update(ended=0, cut=0)
    server = web.Application(client_max_size=8 * MiB)
    server.router.add_get("/bytes", _bytes)
    server.router.add_post("/echo", _echo)
    server.router.add_get("/{tail:.*}", _where)
    runner = web.AppRunner(server)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def test_a_local_agent_serves_links_in_memory_each_for_its_own_session(
    url: str, admin: httpx.AsyncClient, local: tuple[LocalAgent, FakeAgent]  # noqa: F811
) -> None:
    agent, silent = local
    first, second = await running(admin), await running(admin)
    async with httpx.AsyncClient(base_url=url, headers=admin.headers, timeout=60) as person:
        for sid in (first, second, first):
            r = await person.get("/who?x=1", headers=on(url, sid, "echo"))
            assert r.status_code == 200 and r.json() == {"path": "/who?x=1"}, r.text
        # one link per session, the first reused; each served only its own session
        assert agent.opened == [first, second]
        assert agent.asked == [first, second, first]

        body = bytes(range(256)) * (12 * 1024)  # 3 MiB up, streamed
        r = await person.post("/echo", content=body, headers=on(url, first, "echo"))
        assert r.status_code == 200 and r.content == body
        size = 40 * MiB  # down, streamed through the bounded lanes
        r = await person.get(f"/bytes?n={size}", headers=on(url, second, "echo"))
        expected = hashlib.sha256((bytes(range(256)) * 4096) * 40).hexdigest()
        assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == expected
    assert silent.links == []  # nothing went through the channel


async def test_port_forwarding_over_a_local_link_carries_100_mib_intact(
    url: str, admin: httpx.AsyncClient, local: tuple[LocalAgent, FakeAgent],  # noqa: F811
    echo_port: int,
) -> None:
    agent, silent = local
    sid = await running(admin)
    token = await token_of(admin)
    tunnel = await Tunnel.open(tunnel_url(url, sid, echo_port), token)
    sent, got = hashlib.sha256(), hashlib.sha256()
    size = 100 * MiB

    async def up() -> None:
        block = os.urandom(MiB)
        for _ in range(size // MiB):
            sent.update(block)
            await tunnel.send(block)
        await tunnel.end()

    async def down() -> int:
        count = 0
        while (data := await tunnel.receive()) is not None:
            got.update(data)
            count += len(data)
        return count

    async with asyncio.timeout(scaled(120)):
        _, count = await asyncio.gather(up(), down())
    await tunnel.close()
    assert count == size and got.hexdigest() == sent.hexdigest() and not tunnel.broken
    assert agent.opened == [sid] and silent.links == []
    # refusals still come before any upgrade: a closed port, someone else's session
    closed = free_port()
    with pytest.raises(ApiError) as refused:
        await Tunnel.open(tunnel_url(url, sid, closed), token)
    assert refused.value.code == "port_closed"
    with pytest.raises(ApiError) as refused:
        await Tunnel.open(tunnel_url(url, sid, echo_port), None)
    assert refused.value.status == 401


async def test_a_small_answer_comes_in_one_message_when_the_manager_takes_it(
    app_port: int,
) -> None:
    async with aiohttp.ClientSession(read_bufsize=READ_BUFSIZE) as client:
        agent = LocalAgent(client, app_port)
        launch = AppLaunch(name="echo", port=app_port, command=[])
        manager_end = agent.open_local("s1", idle=5, ping=20)
        received = []
        async with asyncio.timeout(scaled(10)):
            for whole in (SMALL, 0):  # this manager; one that does not know `whole`
                ask = OpenHttp(app=launch, method="GET", target="/who", whole=whole)
                await manager_end.send_text(ask.model_dump_json())
                received.append(await manager_end.receive())
                if whole == 0:
                    received += [await manager_end.receive(), await manager_end.receive()]
            await manager_end.close()
    head, _, body = received[0]["bytes"].partition(b"\n")
    assert json.loads(head)["status"] == 200 and json.loads(body) == {"path": "/who"}
    assert [m.get("bytes") or json.loads(m["text"])["op"] for m in received[1:]] == [
        "head", body, "end"]
    assert agent.asked == ["s1", "s1"]  # one link carried both exchanges



async def test_a_download_the_client_left_stops_at_the_app(
    url: str, admin: httpx.AsyncClient, local: tuple[LocalAgent, FakeAgent],  # noqa: F811
    app_port: int,
) -> None:
    """A client that leaves in the middle of a big answer: the manager stops reading the link
    and the app's answer is cut off (a dialled link's behaviour), not read to its end at
    memory speed for nobody (an endless answer: forever)."""
    sid = await running(admin)
    async with httpx.AsyncClient(base_url=url, headers=admin.headers, timeout=60) as person:
        async with person.stream("GET", f"/bytes?n={1024 * 1024 * MiB}",  # 1 TiB
                                 headers=on(url, sid, "echo")) as r:
            assert r.status_code == 200, await r.aread()
            async for _chunk in r.aiter_raw():
                break
        async with asyncio.timeout(scaled(10)):
            while not _WRITERS["ended"]:
                await asyncio.sleep(0.05)
    assert _WRITERS["cut"] == 1

