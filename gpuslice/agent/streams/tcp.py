"""Port forwarding over a link: one TCP connection to a port of a session's container.

The agent connects from the node, nothing is published: to the port on the session's own
loopback first, with a socket made in its network namespace (``netns.py``: what listens on
``127.0.0.1`` only is reached too, as with ``kubectl port-forward``), else, when that is
refused or the agent may not enter the namespace, at the container's own address. It answers
:class:`TcpOpened`, then passes bytes both ways: binary frames are the
connection's bytes, :class:`End` a half-close (the side that sent it writes no more, the other
may still answer, as TCP allows). The link ends when both sides ended, when either side
closes or resets, or when the session's container goes (:meth:`Tunnels.forget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import aiohttp
from pydantic import TypeAdapter, ValidationError

from gpuslice.agent.streams.apps import Addresses
from gpuslice.agent.streams.netns import socket_in
from gpuslice.agent.streams.ports import SessionPorts
from gpuslice.agent.streams.socket import LinkSocket
from gpuslice.common.schemas.streams import End, Failed, OpenTcp, TcpOpened

log = logging.getLogger(__name__)
CHUNK = 1024 * 1024  # most bytes per frame: few, large frames keep a bulk copy fast
CONNECT_TIMEOUT = 10.0
END = End().model_dump_json()
ENDS: TypeAdapter[End] = TypeAdapter(End)


class Tunnels:
    """The port-forwarding connections of this node's sessions, to end with their session."""

    def __init__(self, addresses: Addresses, ports: SessionPorts) -> None:
        self.addresses = addresses
        self.ports = ports
        self._open: dict[asyncio.Event, str] = {}  # a connection's stop signal -> its session

    async def serve(self, ws: LinkSocket, session_id: str, ask: OpenTcp) -> None:
        """Connect to the port and relay until the connection is over; :class:`Failed` (409
        no container, 502 ``port_closed``) when it cannot connect."""
        address = await self.addresses.of(session_id, fresh=True)
        if address is None:
            await _fail(ws, 409, "not_running", "the session's container is not running")
            return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                sock = await self._connect(session_id, address, ask.port)
        except (OSError, TimeoutError) as exc:
            await _fail(ws, 502, "port_closed",
                        f"nothing accepts connections on port {ask.port} in the session "
                        f"({exc.strerror or 'no answer'}); start a server on that port "
                        "there first")
            return
        stop = asyncio.Event()
        self._open[stop] = session_id
        try:
            await ws.send_str(TcpOpened(port=ask.port).model_dump_json())
            await _relay(ws, sock, stop)
        finally:
            del self._open[stop]
            sock.close()

    async def _connect(self, session_id: str, address: str, port: int) -> socket.socket:
        """A connected non-blocking socket: the port on the session's loopback, else at its
        address."""
        loop = asyncio.get_running_loop()
        pid = await self.ports.pid_of(session_id)
        if pid is not None:
            try:
                inside = await asyncio.to_thread(socket_in, pid)
            except OSError as exc:  # not root, or the container just went
                log.debug("port forwarding: not in the session's namespace: %s", exc)
            else:
                try:
                    await _connected(loop, inside, ("127.0.0.1", port))
                    return inside
                except OSError:  # listens on the container's address alone, or not at all
                    pass
        outside = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        outside.setblocking(False)
        await _connected(loop, outside, (address, port))
        return outside

    def forget(self, keep: set[str]) -> None:
        """End the connections of sessions not in ``keep`` (their containers are gone)."""
        for stop, session_id in list(self._open.items()):
            if session_id not in keep:
                stop.set()

    def close(self) -> None:
        self.forget(set())


async def _connected(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                     where: tuple[str, int]) -> None:
    try:
        await loop.sock_connect(sock, where)
    except BaseException:
        sock.close()
        raise


async def _relay(ws: LinkSocket, sock: socket.socket, stop: asyncio.Event) -> None:
    """Both directions until both ended (each half-closes the other's way) or one broke.
    The socket is read and written directly, not through a stream: each read takes all that
    arrived (up to ``CHUNK``), so a bulk copy goes in few, large frames."""
    up = asyncio.create_task(_to_port(ws, sock))
    down = asyncio.create_task(_from_port(sock, ws))
    stopped = asyncio.create_task(stop.wait())
    pending = {up, down}
    try:
        while pending:
            done, _ = await asyncio.wait(pending | {stopped},
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopped in done:
                return
            for task in done & pending:
                pending.discard(task)
                if task.exception() is not None or task.result() is False:
                    return  # a reset or a closed link: the whole connection is over
    finally:
        for task in (up, down, stopped):
            task.cancel()
        await asyncio.gather(up, down, stopped, return_exceptions=True)


async def _to_port(ws: LinkSocket, sock: socket.socket) -> bool:
    """The manager's bytes to the port; ``True`` at its half-close, ``False`` if the link
    closed."""
    loop = asyncio.get_running_loop()
    while True:
        message = await ws.receive()
        if message.type is aiohttp.WSMsgType.BINARY:
            await loop.sock_sendall(sock, message.data)
        elif message.type is aiohttp.WSMsgType.TEXT:
            try:
                ENDS.validate_json(message.data)
            except ValidationError:
                log.info("port forwarding: a control message that is not an end; closed")
                return False
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            return True
        else:
            return False


async def _from_port(sock: socket.socket, ws: LinkSocket) -> bool:
    """The port's bytes to the manager, then :class:`End` at its half-close."""
    loop = asyncio.get_running_loop()
    while data := await loop.sock_recv(sock, CHUNK):
        await ws.send_bytes(data)
    await ws.send_str(END)
    return True


async def _fail(ws: LinkSocket, status: int, code: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await ws.send_str(Failed(status=status, code=code, message=message).model_dump_json())
