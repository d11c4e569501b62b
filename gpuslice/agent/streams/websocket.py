"""An app's WebSocket over a link: opened to the app with the person's handshake headers (as
the manager filtered them), then relayed message by message, text as text and binary as
binary, with no size cap of its own, until either side closes (its close code passed on)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from gpuslice.agent.streams.http import StreamFailure, Upstream
from gpuslice.agent.streams.socket import LinkSocket
from gpuslice.common.schemas.streams import (
    Failed,
    OpenWebSocket,
    WebSocketOpened,
    without_hop_by_hop,
)

Socket = aiohttp.ClientWebSocketResponse | LinkSocket


async def serve_websocket(ws: LinkSocket, session_id: str, ask: OpenWebSocket,
                          upstream: Upstream, ping: float) -> None:
    """Open the app's WebSocket and relay until one side closes; answers :class:`Failed`
    when the app cannot be reached or refuses the handshake."""
    try:
        url = await upstream.url(session_id, ask.app, ask.target, "ws")
        app = await upstream.client.ws_connect(
            url, headers=without_hop_by_hop(ask.headers), protocols=ask.subprotocols,
            max_msg_size=0, heartbeat=ping, compress=0,
        )
    except StreamFailure as failure:
        await ws.send_str(failure.failed.model_dump_json())
        return
    except aiohttp.WSServerHandshakeError as exc:
        await ws.send_str(Failed(
            status=exc.status if 400 <= exc.status <= 599 else 502, code="app_refused",
            message=f"{ask.app.name} refused the WebSocket: {exc.status} {exc.message}"[:4000],
        ).model_dump_json())
        return
    except aiohttp.ClientError as exc:
        await ws.send_str(Failed(
            code="app_unreachable",
            message=f"{ask.app.name} does not answer on port {ask.app.port}: {exc}"[:4000],
        ).model_dump_json())
        return
    async with app:
        await ws.send_str(WebSocketOpened(subprotocol=app.protocol).model_dump_json())
        await relay(ws, app)


async def relay(a: Socket, b: Socket) -> None:
    """Pass messages both ways until one side closes; close the other with its code."""
    forward = asyncio.create_task(_pipe(a, b))
    backward = asyncio.create_task(_pipe(b, a))
    done, pending = await asyncio.wait({forward, backward},
                                       return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    closed_first, other = (a, b) if forward in done else (b, a)
    code = closed_first.close_code or 1000
    with contextlib.suppress(Exception):
        await other.close(code=code if code in range(1000, 5000) else 1011)


async def _pipe(source: Socket, sink: Socket) -> None:
    async for message in source:
        if message.type is aiohttp.WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type is aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type is aiohttp.WSMsgType.ERROR:
            return
