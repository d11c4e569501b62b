"""Links: WebSockets agents dial back to this manager, each carrying one stream at a time.

To reach a session's terminal or app, the manager needs a link to the agent of the session's
node. It never dials a node: :meth:`LinkPool.open` posts a ``stream`` request on the channel
(naming this replica's address, ``nodes.advertise_url``), the agent dials
``/api/v1/agents/me/streams/{request id}`` back, and :meth:`LinkPool.attach` hands that socket
to the waiter, here, in this process. The channel's rules hold: only the addressed node may
dial back, once, before the request expires (``apps.dial_back_timeout``).

An HTTP exchange leaves its link open: the link goes back to the pool, and the next request to
the same session takes it without a round through the channel (that round costs tens of
milliseconds; an idle link costs nothing). The agent closes a link idle for ``apps.link_idle``;
the pool only reuses links idle for less, so a reused link is never one the agent is closing.
WebSockets and terminals keep their link to the end, then it closes.

An agent running in this very process (`gpuslice up`) registers with :meth:`LinkPool.local`:
its node's links are then in-memory pipes (``agent/streams/memory.py``) it serves at once, for
the session the manager names, with no channel request, no dial-back and no WebSocket. The
rest holds as for a dialled link: one session per link, the same messages, bounded lanes
(back-pressure), reuse, ``apps.max_links``. Agents on other nodes dial back as always.

Each link has one reader (:meth:`Link.pump`, the agent endpoint's own task) filling a small
queue: a slow consumer stops the reading, and TCP carries the back-pressure to the agent, so
a download never piles up in the manager's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from gpuslice.common.schemas.agents import StreamAsk
from gpuslice.manager.db.base import new_id
from gpuslice.manager.errors import AgentTimeout, Conflict, NotFound
from gpuslice.manager.services import channel as channel_service
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.settings import AppsSettings

INBOX = 8  # messages a link holds before its reader waits
_REUSE_MARGIN = 2.0  # seconds short of the agent's idle limit a pooled link stops being reused


class Socket(Protocol):
    """The WebSocket an agent dialled (Starlette's)."""

    async def receive(self) -> Any: ...

    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int = 1000, reason: str | None = None) -> None: ...


class LocalAgent(Protocol):
    """An agent in this process: opens a link for a session of its node, in memory."""

    def open_local(self, session_id: str, idle: float, ping: float) -> Socket: ...


class LinkClosed(Exception):
    """The link ended (the agent went away, or it was closed here)."""


class Link:
    """One dialled-back link to an agent, for one session."""

    def __init__(self, socket: Socket, node_id: str, session_id: str) -> None:
        self.socket = socket
        self.node_id = node_id
        self.session_id = session_id
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.idle_since = 0.0
        self._inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue(INBOX)

    async def pump(self) -> None:
        """Read the agent's messages into the inbox until the link ends (the endpoint's task)."""
        try:
            while True:
                message = await self.socket.receive()
                if message["type"] == "websocket.disconnect":
                    self.close_code = message.get("code")
                    return
                data = message.get("bytes")
                await self._inbox.put(data if data is not None else message.get("text", ""))
        except Exception:  # the connection broke: the link is over
            return
        finally:
            self.closed.set()
            with contextlib.suppress(asyncio.QueueFull):  # a waiting reader: wake it
                self._inbox.put_nowait(None)

    async def receive(self) -> str | bytes:
        """The agent's next message: text (a control message) or bytes."""
        if self._inbox.empty() and self.closed.is_set():
            raise LinkClosed(f"the agent's link closed ({self.close_code})")
        item = await self._inbox.get()
        if item is None:
            raise LinkClosed(f"the agent's link closed ({self.close_code})")
        return item

    async def send_text(self, data: str) -> None:
        try:
            await self.socket.send_text(data)
        except Exception as exc:
            raise LinkClosed(f"the agent's link closed: {exc}") from None

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.socket.send_bytes(data)
        except Exception as exc:
            raise LinkClosed(f"the agent's link closed: {exc}") from None

    async def close(self, code: int = 1000) -> None:
        if not self.closed.is_set():
            with contextlib.suppress(Exception):
                await self.socket.close(code)
        self.closed.set()

    @property
    def quiet(self) -> bool:
        """Nothing unread: the agent is not in the middle of anything on it."""
        return self._inbox.empty() and not self.closed.is_set()


class LinkPool:
    """This replica's links: the ones being dialled, and idle ones kept for the next request."""

    def __init__(self, channel: Channel, settings: AppsSettings,
                 advertise_url: str | None) -> None:
        self.channel = channel
        self.settings = settings
        self.advertise_url = advertise_url
        self._waiting: dict[str, asyncio.Future[Link]] = {}
        self._idle: dict[str, list[Link]] = {}  # by session
        self._open: dict[str, int] = {}  # links per session, in use or idle
        self._closing: set[asyncio.Task[None]] = set()
        self._local: dict[str, LocalAgent] = {}  # node id -> the agent in this process

    def local(self, node_id: str, agent: LocalAgent | None) -> None:
        """``agent`` (in this process) serves node ``node_id``'s links from now on; ``None``:
        no longer (it stopped), its node's links are dialled back again."""
        if agent is None:
            self._local.pop(node_id, None)
        else:
            self._local[node_id] = agent

    async def acquire(self, node_id: str, session_id: str, about: str, *,
                      reuse: bool) -> Link:
        """A link to ``session_id``'s agent: an idle one when ``reuse`` and there is one,
        else a new one. ``Conflict`` ``too_many_streams`` past ``apps.max_links``,
        ``node_lost``, ``AgentTimeout`` when the agent does not dial back in time."""
        if reuse:
            link = self._take_idle(node_id, session_id)
            if link is not None:
                return link
        if self._open.get(session_id, 0) >= self.settings.max_links:
            raise Conflict(f"{about} has {self.settings.max_links} streams open, the most "
                           "allowed (apps.max_links); close some", code="too_many_streams")
        agent = self._local.get(node_id)
        if agent is not None:
            return self._open_local(agent, node_id, session_id)
        return await self._dial(node_id, session_id, about)

    def release(self, link: Link) -> None:
        """An HTTP exchange ended cleanly: keep the link for the next one."""
        if not link.quiet:
            self._later(link.close())
            return
        link.idle_since = time.monotonic()
        self._idle.setdefault(link.session_id, []).append(link)

    def discard(self, link: Link, code: int = 1000) -> None:
        """A link that may be out of step (a stream cut short): close it, in its own task (the
        caller may be being cancelled)."""
        self._later(link.close(code))

    def _open_local(self, agent: LocalAgent, node_id: str, session_id: str) -> Link:
        """A link to the agent in this process, read by a task of its own."""
        socket = agent.open_local(session_id, self.settings.link_idle,
                                  self.settings.ping_interval)
        link = Link(socket, node_id, session_id)
        self._open[session_id] = self._open.get(session_id, 0) + 1
        self._later(self._pump(link))
        return link

    async def _pump(self, link: Link) -> None:
        try:
            await link.pump()
        finally:
            self._forget(link)

    async def attach(self, request_id: str, socket: Socket, node_id: str,
                     session_id: str) -> None:
        """Hand the agent's dialled ``socket`` to the request's waiter and read it until the
        link ends (the agent endpoint's task). The caller checked the request with
        :meth:`claim`."""
        waiter = self._waiting.get(request_id)
        link = Link(socket, node_id, session_id)
        if waiter is None or waiter.done():  # the waiter gave up meanwhile
            await link.close(1001)
            return
        self._open[session_id] = self._open.get(session_id, 0) + 1
        try:
            waiter.set_result(link)
            await link.pump()
        finally:
            self._forget(link)

    async def claim(self, node_id: str, request_id: str) -> str:
        """The session of stream request ``request_id``, taken now by its node's dial-back;
        ``NotFound`` for any other node, a second dial-back, an expired request, or a request
        nobody here waits for (another replica's, given a wrong ``advertise_url``)."""
        async with self.channel.sessionmaker() as db:
            session_id = await channel_service.claim(db, node_id, request_id, "stream")
        if session_id is None or request_id not in self._waiting:
            raise NotFound(f"no stream {request_id} awaits this node here")
        return session_id

    async def close(self) -> None:
        """The manager stops: close every idle link (streams in use end with their sockets)."""
        for links in list(self._idle.values()):
            for link in links:
                await link.close(1001)
        self._idle.clear()

    # ------------------------------------------------------------ internals

    async def _dial(self, node_id: str, session_id: str, about: str) -> Link:
        timeout = self.settings.dial_back_timeout
        request_id = new_id()
        waiter: asyncio.Future[Link] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = waiter  # before the request exists: a dial-back finds it
        ask = StreamAsk(manager_url=self.advertise_url,
                        idle_ms=round(self.settings.link_idle * 1000),
                        ping_ms=round(self.settings.ping_interval * 1000))
        try:
            await self.channel.post(node_id, ask, timeout=timeout, session_id=session_id,
                                    about=about, request_id=request_id)
            async with asyncio.timeout(timeout):  # not wait_for: see common.waits
                return await asyncio.shield(waiter)
        except TimeoutError:
            raise AgentTimeout(
                f"the agent of {about} did not open a stream within {timeout:g} s (is it "
                "running, and as new as the manager?)"
            ) from None
        finally:
            del self._waiting[request_id]
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(Exception):
                await self.channel.forget(request_id)

    def _take_idle(self, node_id: str, session_id: str) -> Link | None:
        links = self._idle.get(session_id, [])
        fresh_after = time.monotonic() - (self.settings.link_idle - _REUSE_MARGIN)
        while links:
            link = links.pop()
            if link.quiet and link.node_id == node_id and link.idle_since > fresh_after:
                return link
            self._later(link.close())
        return None

    def _later(self, closing: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _forget(self, link: Link) -> None:
        left = self._open.get(link.session_id, 1) - 1
        if left > 0:
            self._open[link.session_id] = left
        else:
            self._open.pop(link.session_id, None)
        idle = self._idle.get(link.session_id)
        if idle is not None and link in idle:
            idle.remove(link)
            if not idle:
                del self._idle[link.session_id]
