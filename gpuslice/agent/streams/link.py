"""One link: the WebSocket this agent dials back to the manager for a ``stream`` request.

The request names the session (the manager's row says so) and where to dial; what the link
carries is named by its first message: an app's HTTP exchange (after which the link waits for
the next one, up to its idle time), an app's WebSocket, a terminal or an SSH connection (any of
which ends the link when it ends). A link only ever serves the session its request named.
"""

from __future__ import annotations

import logging

import aiohttp
from pydantic import TypeAdapter, ValidationError

from gpuslice.agent.runtime.models import ContainerRuntimeError
from gpuslice.agent.streams.http import LinkClosed, Upstream, serve_http
from gpuslice.agent.streams.socket import LinkSocket
from gpuslice.agent.streams.ssh import serve_ssh
from gpuslice.agent.streams.tcp import Tunnels
from gpuslice.agent.streams.terminals import TerminalError, Terminals
from gpuslice.agent.streams.websocket import serve_websocket
from gpuslice.common.schemas.streams import (
    Failed,
    LinkOpen,
    OpenHttp,
    OpenSsh,
    OpenTcp,
    OpenTerminal,
    OpenWebSocket,
    Resize,
    TerminalAttached,
    TerminalExit,
)

log = logging.getLogger(__name__)
OPENS: TypeAdapter[OpenHttp | OpenWebSocket | OpenTerminal | OpenTcp | OpenSsh] = TypeAdapter(
    LinkOpen)
RESIZE = TypeAdapter(Resize)


async def serve_link(ws: LinkSocket, session_id: str, upstream: Upstream, terminals: Terminals,
                     tunnels: Tunnels, idle: float, ping: float) -> None:
    """Serve streams on ``ws`` for ``session_id`` until the manager closes it, it idles for
    ``idle`` seconds, or a stream that ends the link ends."""
    while True:
        try:
            message = await ws.receive(timeout=idle)
        except TimeoutError:
            return
        if message.type is not aiohttp.WSMsgType.TEXT:
            return  # closed (or a frame out of place: the link is out of step)
        try:
            opened = OPENS.validate_json(message.data)
        except ValidationError as exc:
            await _fail(ws, 400, "bad_stream", f"not a stream this agent serves: {exc}")
            return
        try:
            if isinstance(opened, OpenHttp):
                if await serve_http(ws, session_id, opened, upstream):
                    continue
            elif isinstance(opened, OpenWebSocket):
                await serve_websocket(ws, session_id, opened, upstream, ping)
            elif isinstance(opened, OpenTcp):
                await tunnels.serve(ws, session_id, opened)
            elif isinstance(opened, OpenSsh):
                await serve_ssh(ws, session_id, opened, terminals.runtime)
            else:
                await serve_terminal(ws, session_id, opened, terminals)
        except (LinkClosed, ConnectionError, aiohttp.ClientError) as exc:
            log.info("stream link of session %s ended: %s", session_id, exc)
        return


class _LinkSink:
    """A terminal's output going down a link."""

    def __init__(self, ws: LinkSocket) -> None:
        self.ws = ws

    async def output(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def exited(self, code: int) -> None:
        await self.ws.send_str(TerminalExit(code=code).model_dump_json())
        await self.ws.close()


async def serve_terminal(ws: LinkSocket, session_id: str, ask: OpenTerminal,
                         terminals: Terminals) -> None:
    """Attach the link to a terminal (new, or the one asked for) and pass keystrokes,
    resizes and output until either end goes; the shell is then kept for a reattach."""
    try:
        terminal, resumed = await terminals.open(session_id, ask.terminal, ask.rows, ask.cols)
    except (TerminalError, ContainerRuntimeError) as exc:
        await _fail(ws, 409, "terminal_failed", f"no terminal: {exc}")
        return
    await ws.send_str(TerminalAttached(terminal=terminal.id, resumed=resumed).model_dump_json())
    sink = _LinkSink(ws)
    await terminal.attach(sink)
    try:
        async for message in ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                await terminal.write(message.data)
            elif message.type is aiohttp.WSMsgType.TEXT:
                size = RESIZE.validate_json(message.data)
                await terminal.resize(size.rows, size.cols)
    except ValidationError:
        log.info("terminal %s: a control message that is not a resize; link closed",
                 terminal.id)
    finally:
        terminal.detach(sink, ask.keep_ms / 1000)


async def _fail(ws: LinkSocket, status: int, code: str, message: str) -> None:
    await ws.send_str(Failed(status=status, code=code, message=message[:4000]).model_dump_json())
