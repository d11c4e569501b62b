"""An in-process link: the agent in the manager's own process (`gpuslice up`) serves a stream
through a pair of bounded in-memory lanes instead of a WebSocket it dials back over loopback.

Same messages, same order, same ends as the WebSocket (:func:`pipe` gives the manager's end,
shaped like Starlette's WebSocket, and the agent's, a :class:`LinkSocket`), without the
framing, the masking, the loopback TCP and the channel round trip that dialling costs. Each
lane holds at most ``LANE`` messages: a sender waits while it is full, so a slow reader
still holds a fast writer back, as TCP does behind a WebSocket. Closing either end ends both
lanes: what was already sent may still be read, then the reader sees the close; a sender gets
``ConnectionResetError``, as an aiohttp WebSocket's does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import aiohttp

LANE = 8  # messages one way before the sender waits (a WebSocket link's inbox is as small)
_CLOSED = aiohttp.WSMessage(aiohttp.WSMsgType.CLOSED, None, None)


class _Lane:
    """One direction: bounded, any number of senders and one reader."""

    def __init__(self, size: int) -> None:
        self._items: deque[str | bytes] = deque()
        self._size = size
        self._waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.code: int | None = None

    async def put(self, item: str | bytes) -> None:
        while len(self._items) >= self._size and not self.closed:
            await self._wait()
        if self.closed:
            raise ConnectionResetError("the link is closed")
        self._items.append(item)
        self._wake()

    async def get(self) -> str | bytes | None:
        """The next message; ``None`` once closed and read empty."""
        while not self._items:
            if self.closed:
                return None
            await self._wait()
        item = self._items.popleft()
        self._wake()
        return item

    def close(self, code: int) -> None:
        if not self.closed:
            self.closed, self.code = True, code
            self._wake()

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        # Readers and writers share the list: each rechecks its condition when woken.
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class ManagerEnd:
    """The manager's end (``services.apps.links.Socket``): Starlette's message dicts."""

    def __init__(self, down: _Lane, up: _Lane) -> None:
        self._down, self._up = down, up  # to the agent, from the agent

    async def receive(self) -> dict[str, Any]:
        item = await self._up.get()
        if item is None:
            return {"type": "websocket.disconnect", "code": self._up.code}
        if isinstance(item, bytes):
            return {"type": "websocket.receive", "bytes": item}
        return {"type": "websocket.receive", "text": item}

    async def send_text(self, data: str) -> None:
        await self._down.put(data)

    async def send_bytes(self, data: bytes) -> None:
        await self._down.put(data)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        _close(self._down, self._up, code)


class AgentEnd:
    """The agent's end (a :class:`~gpuslice.agent.streams.socket.LinkSocket`)."""

    def __init__(self, down: _Lane, up: _Lane) -> None:
        self._down, self._up = down, up

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
        """The next message (a CLOSED one once the link ended); ``TimeoutError`` after
        ``timeout`` seconds without one."""
        async with asyncio.timeout(timeout):
            item = await self._down.get()
        if item is None:
            return _CLOSED
        if isinstance(item, bytes):
            return aiohttp.WSMessage(aiohttp.WSMsgType.BINARY, item, None)
        return aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, item, None)

    def __aiter__(self) -> AgentEnd:
        return self

    async def __anext__(self) -> aiohttp.WSMessage:
        message = await self.receive()
        if message.type is aiohttp.WSMsgType.CLOSED:
            raise StopAsyncIteration
        return message

    async def send_str(self, data: str) -> None:
        await self._up.put(data)

    async def send_bytes(self, data: bytes) -> None:
        await self._up.put(data)

    @property
    def close_code(self) -> int | None:
        return self._down.code

    async def close(self, code: int = 1000) -> None:
        _close(self._up, self._down, code)


def pipe(size: int = LANE) -> tuple[ManagerEnd, AgentEnd]:
    """A new in-process link: its manager end and its agent end."""
    down, up = _Lane(size), _Lane(size)
    return ManagerEnd(down, up), AgentEnd(down, up)


def _close(mine: _Lane, theirs: _Lane, code: int) -> None:
    """One end closes: its own sending stops at once, and the other end's sending too (nobody
    reads it any more); what is already on the way still reaches the other end."""
    mine.close(code)
    theirs.close(code)
