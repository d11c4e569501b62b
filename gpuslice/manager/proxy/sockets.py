"""WebSockets through the proxy: an app's (Jupyter's kernels, ...) and the terminal.

The person's WebSocket is accepted only once the far end is there: the app accepted its own
handshake (its subprotocol is passed on), or the agent attached a terminal. Until then every
failure is an HTTP answer to the upgrade (401, 403, 404, 409, 502, 504), never a 101. After,
messages pass one by one as they are (no size cap but ``apps.max_message``), both ways, until
either side closes; the close code is passed on. Pings (``apps.ping_interval``) keep idle
connections alive through proxies that drop quiet ones.
"""

from __future__ import annotations

import asyncio
import contextlib

from pydantic import TypeAdapter, ValidationError
from starlette.websockets import WebSocket

from gpuslice.common.schemas.streams import (
    Failed,
    OpenTerminal,
    OpenWebSocket,
    Resize,
    TerminalAttached,
    WebSocketOpened,
)
from gpuslice.manager.errors import DomainError
from gpuslice.manager.proxy import headers
from gpuslice.manager.proxy.http import reply_of
from gpuslice.manager.services.apps.access import AppRoute
from gpuslice.manager.services.apps.links import Link, LinkClosed, LinkPool
from gpuslice.manager.services.apps.traffic import ActivityMeter

RESIZE: TypeAdapter[Resize] = TypeAdapter(Resize)
# Close codes a peer may send (RFC 6455 7.4); others (1005, 1006, 1015) are stand-ins.
_SENDABLE = frozenset(range(1000, 1004)) | frozenset(range(1007, 1015)) | frozenset(
    range(3000, 5000))


class StreamRefused(DomainError):
    """The far end would not open: its HTTP status and reason, for the upgrade's answer."""

    def __init__(self, reply: object) -> None:
        failed = reply if isinstance(reply, Failed) else Failed(
            code="agent_error", message="the agent answered out of step")
        super().__init__(failed.message, code=failed.code)
        self.status = failed.status


async def open_app_socket(ws: WebSocket, route: AppRoute,
                          pool: LinkPool) -> tuple[Link, str | None]:
    """A link on which the app accepted the WebSocket, and its chosen subprotocol."""
    assert route.launch is not None, "the terminal has its own route"
    protocols = [p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",")
                 if p.strip()]
    ask = OpenWebSocket(app=route.launch, target=headers.target(ws),
                        headers=headers.upstream(ws, route, body=False), subprotocols=protocols)
    link, reply = await open_link(pool, route, ask.model_dump_json())
    if not isinstance(reply, WebSocketOpened):
        raise StreamRefused(reply)
    return link, reply.subprotocol


async def open_terminal(pool: LinkPool, route: AppRoute, terminal: str | None, rows: int,
                        cols: int, keep: float) -> tuple[Link, TerminalAttached]:
    """A link on which the agent attached a terminal (the one asked for, if it is kept)."""
    ask = OpenTerminal(terminal=terminal, rows=rows, cols=cols, keep_ms=round(keep * 1000))
    link, reply = await open_link(pool, route, ask.model_dump_json())
    if not isinstance(reply, TerminalAttached):
        raise StreamRefused(reply)
    return link, reply


async def relay(ws: WebSocket, link: Link, pool: LinkPool, meter: ActivityMeter,
                session_id: str, *, terminal: bool) -> None:
    """Pass messages both ways until one side closes; close the other with its code. On a
    terminal, text from the person must be a resize."""
    person = asyncio.create_task(_from_person(ws, link, meter, session_id, terminal))
    agent = asyncio.create_task(_from_agent(ws, link, meter, session_id))
    done, _ = await asyncio.wait({person, agent}, return_when=asyncio.FIRST_COMPLETED)
    for task in (person, agent):
        task.cancel()
    await asyncio.gather(person, agent, return_exceptions=True)
    if person in done:
        failed = person.cancelled() or person.exception() is not None
        pool.discard(link, 1000 if failed else _sendable(person.result()))
    else:
        with contextlib.suppress(Exception):
            await ws.close(_sendable(link.close_code or 1000))
        pool.discard(link)


async def open_link(pool: LinkPool, route: AppRoute, ask: str) -> tuple[Link, object]:
    """A new link to the session's agent with ``ask`` sent on it, and the agent's first
    answer (a :class:`Failed` one has closed the link)."""
    link = await pool.acquire(route.node_id, route.session_id, f"session {route.session_name}",
                              reuse=False)
    try:
        await link.send_text(ask)
        reply = await reply_of(link)
    except BaseException:
        pool.discard(link)
        raise
    if isinstance(reply, Failed):
        pool.discard(link)
    return link, reply


async def _from_person(ws: WebSocket, link: Link, meter: ActivityMeter, session_id: str,
                       terminal: bool) -> int:
    """Relay the person's messages; their close code once they close."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return int(message.get("code") or 1000)
        meter.touch(session_id)
        data = message.get("bytes")
        if data is not None:
            await link.send_bytes(data)
            continue
        text = message.get("text") or ""
        if terminal:
            try:
                text = RESIZE.validate_json(text).model_dump_json()
            except ValidationError:  # a terminal takes bytes, and resizes as text
                await ws.close(1003, "text on a terminal must be a resize")
                return 1003
        await link.send_text(text)


async def _from_agent(ws: WebSocket, link: Link, meter: ActivityMeter, session_id: str) -> None:
    with contextlib.suppress(LinkClosed):
        while True:
            item = await link.receive()
            meter.touch(session_id)
            if isinstance(item, bytes):
                await ws.send_bytes(item)
            else:
                await ws.send_text(item)


def _sendable(code: int) -> int:
    return code if code in _SENDABLE else 1000
