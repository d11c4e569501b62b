"""Port forwarding from Python: a TCP connection to a port of a running session, carried by the
manager's WebSocket (``/api/v1/sessions/{id}/ports/{port}``) and the link the session's agent
dialled back, so a node behind NAT is reached too.

    tunnel = await Tunnel.open(tunnel_url(client.url, session.id, 5000), client.token)
    await tunnel.send(b"hello")
    await tunnel.end()                       # no more from us (TCP's half-close)
    while (data := await tunnel.receive()) is not None:
        ...

:func:`splice` joins a tunnel to a local connection (``gpuslice session port-forward``'s
listeners, and its ``--stdio`` mode, OpenSSH's ``ProxyCommand``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException

from gpuslice.client.errors import ApiError, error_of

API = "/api/v1"
CHUNK = 1024 * 1024  # most bytes read at once from a local connection
_END = json.dumps({"op": "end"})


def tunnel_url(base_url: str, session_id: str, port: int) -> str:
    """The WebSocket URL of a connection to ``port`` of the session ``session_id``."""
    return "ws" + base_url.rstrip("/").removeprefix("http") + \
        f"{API}/sessions/{session_id}/ports/{port}"


class Tunnel:
    """One TCP connection to a session's port."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self.broken = False  # the tunnel closed without the far end's half-close

    @classmethod
    async def open(cls, url: str, token: str | None, *, timeout: float = 30.0) -> Tunnel:
        """Connect; ``ApiError`` with the manager's reason when it refuses (401, 404, 409
        ``not_running``, 502 ``port_closed``)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            ws = await connect(url, additional_headers=headers, open_timeout=timeout,
                               max_size=None, compression=None, ping_interval=20,
                               ping_timeout=20, write_limit=4 * CHUNK)
        except InvalidStatus as exc:
            raise refusal(exc) from None
        except (OSError, InvalidURI, WebSocketException, TimeoutError) as exc:
            raise ApiError(f"cannot reach the manager at {url}: {exc}",
                           code="unreachable") from None
        return cls(ws)

    async def send(self, data: bytes) -> None:
        """Bytes for the session's port (``ConnectionError`` once the tunnel is closed)."""
        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise ConnectionError(f"the tunnel closed: {exc}") from None

    async def end(self) -> None:
        """We write no more; the far end may still answer."""
        try:
            await self._ws.send(_END)
        except ConnectionClosed:
            pass

    async def receive(self) -> bytes | None:
        """The port's next bytes; ``None`` once it wrote its last (or the tunnel closed)."""
        while True:
            try:
                message = await self._ws.recv()
            except ConnectionClosed:
                self.broken = True
                return None
            if isinstance(message, bytes):
                return message
            if json.loads(message).get("op") == "end":
                return None

    async def close(self) -> None:
        await self._ws.close()


async def splice(tunnel: Tunnel, read: Callable[[], Awaitable[bytes]],
                 write: Callable[[bytes], Awaitable[None]],
                 write_eof: Callable[[], None]) -> None:
    """Pass bytes between a local connection (``read`` gives ``b""`` at its end) and the
    tunnel until both sides ended, or either broke; then close the tunnel."""
    up = asyncio.create_task(_up(tunnel, read))
    down = asyncio.create_task(_down(tunnel, write, write_eof))
    pending = {up, down}
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(task.exception() is not None for task in done):
                return
            if down in done and up in pending and not down.result():
                return  # the tunnel closed under us: nothing more can go up
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        await tunnel.close()


async def _up(tunnel: Tunnel, read: Callable[[], Awaitable[bytes]]) -> None:
    while data := await read():
        await tunnel.send(data)
    await tunnel.end()


async def _down(tunnel: Tunnel, write: Callable[[bytes], Awaitable[None]],
                write_eof: Callable[[], None]) -> bool:
    """The tunnel's bytes to the local side; ``True`` when the far end half-closed."""
    while (data := await tunnel.receive()) is not None:
        await write(data)
    write_eof()
    return not tunnel.broken


def refusal(exc: InvalidStatus) -> ApiError:
    """The manager's reason for refusing a WebSocket, from its HTTP answer."""
    return error_of(exc.response.status_code, bytes(exc.response.body or b""))
