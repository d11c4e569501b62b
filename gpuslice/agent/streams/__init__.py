"""Terminals and apps of this node's sessions, reached by people through the manager.

The manager never dials a node. For each ``stream`` request the agent dials the manager back
(a WebSocket to ``/api/v1/agents/me/streams/{request id}``, as the node) and serves on that
link what its first message names: an app's HTTP exchange or WebSocket at the session
container's own address (``http``, ``websocket``), a terminal, a TTY exec in the container
(``terminals``), a TCP connection to one of its ports (``tcp``: port forwarding), or an SSH
connection, an ``sshd -i`` exec per connection (``ssh``). Apps are started on first use
(``apps``); ``apps`` requests ask for their states and the ports served in the session
(``ports``: any server a user starts is an app). A link serves only the session its request
named.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from gpuslice.agent.manager_link import ManagerLink
from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.streams.apps import Addresses, AppSupervisor
from gpuslice.agent.streams.http import Upstream
from gpuslice.agent.streams.link import serve_link
from gpuslice.agent.streams.memory import ManagerEnd, pipe
from gpuslice.agent.streams.ports import SessionPorts
from gpuslice.agent.streams.socket import LinkSocket, WebSocketLink
from gpuslice.agent.streams.tcp import Tunnels
from gpuslice.agent.streams.terminals import Terminals
from gpuslice.common.schemas.agents import AppLaunch, AppsAnswer, AppsAsk, StreamAsk

log = logging.getLogger(__name__)
STREAMS_PATH = "/api/v1/agents/me/streams"


class StreamService:
    """Dials links back for stream requests and serves them; starts and watches apps."""

    def __init__(self, runtime: DockerRuntime, link: ManagerLink) -> None:
        self.link = link
        self.addresses = Addresses(runtime)
        self.apps = AppSupervisor(runtime, self.addresses)
        self.terminals = Terminals(runtime)
        self.ports = SessionPorts(runtime)
        self.tunnels = Tunnels(self.addresses, self.ports)
        self._client: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._autostarted: set[tuple[str, str]] = set()

    async def open_link(self, request_id: str, session_id: str, ask: StreamAsk) -> None:
        """Dial the manager back for request ``request_id`` and serve the link it becomes."""
        credential = self.link.credential
        if credential is None:
            raise RuntimeError("not connected to the manager")
        base = (ask.manager_url or self.link.manager_url).rstrip("/")
        url = "ws" + base.removeprefix("http") + f"{STREAMS_PATH}/{request_id}"
        client = self.client()
        async with client.ws_connect(
            url, headers={"Authorization": f"Bearer {credential.secret}"},
            # The manager's pings keep the link alive through proxies; the agent's own, half as
            # often, find a manager gone silent (its pong is due within the manager's interval).
            heartbeat=2 * ask.ping_ms / 1000, max_msg_size=0, compress=0,
        ) as ws:
            await self._serve(WebSocketLink(ws), session_id, ask.idle_ms / 1000,
                              ask.ping_ms / 1000)

    def open_local(self, session_id: str, idle: float, ping: float) -> ManagerEnd:
        """A link for ``session_id`` in this process (the manager's own, under `gpuslice up`):
        the manager's end of an in-memory pipe whose other end is served here as a dialled
        link would be, for that session only."""
        manager_end, agent_end = pipe()
        task = asyncio.create_task(self._serve(agent_end, session_id, idle, ping))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return manager_end

    async def _serve(self, link: LinkSocket, session_id: str, idle: float,
                     ping: float) -> None:
        try:
            upstream = Upstream(self.addresses, self.apps, self.client())
            await serve_link(link, session_id, upstream, self.terminals, self.tunnels,
                             idle=idle, ping=ping)
        finally:
            await link.close()

    async def states(self, session_id: str, ask: AppsAsk) -> AppsAnswer:
        """The apps' states, after starting ``ask.start`` (waiting for it) when asked; with
        ``ask.ports``, the ports served in the session too."""
        statuses = []
        for launch in ask.apps:
            if launch.name == ask.start:
                statuses.append(await self.apps.ensure(session_id, launch))
            else:
                statuses.append(await self.apps.status(session_id, launch))
        ports = await self.ports.of(session_id) if ask.ports else []
        return AppsAnswer(apps=statuses, ports=ports)

    def autostart(self, session_id: str, launches: list[AppLaunch]) -> None:
        """Start the apps a session asked for at its creation (once per agent process)."""
        for launch in launches:
            if (session_id, launch.name) in self._autostarted:
                continue
            self._autostarted.add((session_id, launch.name))
            task = asyncio.create_task(self._autostart(session_id, launch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def forget(self, keep: set[str]) -> None:
        """Sessions whose containers are gone: their terminals, apps and addresses go too."""
        self.apps.forget(keep)
        self.terminals.forget(keep)
        self.tunnels.forget(keep)
        self.addresses.keep(keep)
        self._autostarted = {k for k in self._autostarted if k[0] in keep}

    def client(self) -> aiohttp.ClientSession:
        """One HTTP client for dial-backs and apps: kept-alive connections, nothing decoded
        or followed, no cookies kept, no read timeout."""
        if self._client is None:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
                cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
                read_bufsize=2**18,
            )
        return self._client

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.terminals.close()
        self.tunnels.close()
        await self.apps.close()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _autostart(self, session_id: str, launch: AppLaunch) -> None:
        status = await self.apps.ensure(session_id, launch)
        log.info("app %s of session %s: %s %s", launch.name, session_id, status.state.value,
                 status.message)
