"""The link's WebSocket, read by one task for as long as it is open.

A WebSocket answers pings (and sees the pongs of its own) only while someone reads it. On a
link the agent may only *send* for minutes (a long download, an event stream): without a
reader, the manager's pings would go unanswered and the link be dropped as dead. So one task
reads all along into a small queue the streams take messages from; when the queue is full the
reading waits, and TCP carries the back-pressure to the manager.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import aiohttp

INBOX = 8  # messages read ahead of the stream that takes them
_ENDED = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED,
          aiohttp.WSMsgType.ERROR)
_CLOSED = aiohttp.WSMessage(aiohttp.WSMsgType.CLOSED, None, None)


class LinkSocket(Protocol):
    """A link's agent end, as the streams use it: the dialled-back WebSocket
    (:class:`WebSocketLink`), or the in-process pipe of an agent in the manager's process
    (``memory.py``)."""

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage: ...

    def __aiter__(self) -> LinkSocket: ...

    async def __anext__(self) -> aiohttp.WSMessage: ...

    async def send_str(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    @property
    def close_code(self) -> int | None: ...

    async def close(self, code: int = 1000) -> None: ...


class WebSocketLink:
    """The dialled-back WebSocket: messages to take, bytes and text to send."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._inbox: asyncio.Queue[aiohttp.WSMessage] = asyncio.Queue(INBOX)
        self._reader = asyncio.create_task(self._read())

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
        """The next message (a CLOSED one once the link ended); ``TimeoutError`` after
        ``timeout`` seconds without one."""
        if self._reader.done() and self._inbox.empty():
            return _CLOSED
        return await asyncio.wait_for(self._inbox.get(), timeout)

    def __aiter__(self) -> WebSocketLink:
        return self

    async def __anext__(self) -> aiohttp.WSMessage:
        message = await self.receive()
        if message.type in _ENDED:
            raise StopAsyncIteration
        return message

    async def send_str(self, data: str) -> None:
        await self.ws.send_str(data)

    async def send_bytes(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    async def close(self, code: int = 1000) -> None:
        await self.ws.close(code=code)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        try:
            while True:
                message = await self.ws.receive()  # answers pings, notes pongs
                await self._inbox.put(message)
                if message.type in _ENDED:
                    return
        except (aiohttp.ClientError, ConnectionError):
            await self._inbox.put(_CLOSED)
