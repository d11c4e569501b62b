"""Local ends of port forwarding: listeners whose every connection becomes a tunnel to a
session's port, and this process's stdin/stdout as one tunnel (OpenSSH's ``ProxyCommand``).

Both end with the session: :func:`serve` asks ``ended`` every ``poll`` seconds and closes its
listeners and connections once the session is no longer running; a tunnel's own link closes
when the session's container goes, which ends :func:`stdio`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gpuslice.client.errors import ApiError
from gpuslice.client.tunnel import CHUNK, Tunnel, splice

OpenTunnel = Callable[[int], Awaitable[Tunnel]]
POLL = 2.0  # seconds between checks that the session still runs


@dataclass(frozen=True, slots=True)
class Forward:
    local: int  # 0: any free port
    remote: int


def parse_forward(text: str) -> Forward:
    """``REMOTE`` (the same port here) or ``LOCAL:REMOTE`` (``0:REMOTE``: any free local
    port); ``ValueError`` saying what is allowed."""
    local, _, remote = text.rpartition(":")
    try:
        ports = (int(local) if local else int(remote), int(remote))
    except ValueError:
        raise ValueError(f"{text!r} is not a port: give PORT or LOCAL:REMOTE, e.g. 5000 or "
                         "8080:5000") from None
    if not 1 <= ports[1] <= 65535 or not 0 <= ports[0] <= 65535:
        raise ValueError(f"{text!r}: ports are numbers from 1 to 65535 (0 for LOCAL picks a "
                         "free one)")
    return Forward(*ports)


async def serve(open_tunnel: OpenTunnel, forwards: list[Forward], addresses: list[str],
                say: Callable[[str], None],
                ended: Callable[[], Awaitable[str | None]], poll: float = POLL) -> str:
    """Listen on each address and local port, and tunnel every connection to its remote port,
    until ``ended`` gives a reason (the session stopped running): that reason."""
    connections: set[asyncio.Task[None]] = set()
    listeners: list[socket.socket] = []
    try:
        for forward in forwards:
            for address in addresses:
                listener = _listen(address, forward.local)
                listeners.append(listener)
                host, port = listener.getsockname()[:2]
                say(f"Forwarding from {_where(host, port)} -> {forward.remote}")
                _spawn(connections, _accept(open_tunnel, listener, forward.remote, say,
                                            connections))
        while (reason := await ended()) is None:
            await asyncio.sleep(poll)
        return reason
    finally:
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        for listener in listeners:
            listener.close()


async def stdio(open_tunnel: OpenTunnel, port: int) -> None:
    """This process's stdin to the session's port and its answer to stdout, until both ended
    (or the tunnel closed: the session ended). ``ApiError`` when it cannot open."""
    tunnel = await open_tunnel(port)
    stdin = _StdinReader(asyncio.get_running_loop())
    out = sys.stdout.buffer

    async def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    def write_eof() -> None:
        with contextlib.suppress(OSError):
            out.close()

    await splice(tunnel, stdin.read, write, write_eof)


def _listen(address: str, port: int) -> socket.socket:
    """A listening socket (read and written directly, not through asyncio's streams: each
    read takes all that arrived, up to ``CHUNK``, so a bulk copy goes in few, large frames)."""
    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.create_server((address, port), family=family)
    except OSError as exc:
        raise ApiError(f"cannot listen on {_where(address, port)}: "
                       f"{exc.strerror or exc}", code="listen_failed") from None
    listener.setblocking(False)
    return listener


async def _accept(open_tunnel: OpenTunnel, listener: socket.socket, remote: int,
                  say: Callable[[str], None], connections: set[asyncio.Task[None]]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        _spawn(connections, _connection(open_tunnel, remote, conn, say))


async def _connection(open_tunnel: OpenTunnel, remote: int, conn: socket.socket,
                      say: Callable[[str], None]) -> None:
    loop = asyncio.get_running_loop()
    with conn:
        try:
            tunnel = await open_tunnel(remote)
        except ApiError as err:
            say(f"a connection to port {remote} failed: {err.message}")
            return

        async def read() -> bytes:
            try:
                return await loop.sock_recv(conn, CHUNK)
            except ConnectionError:
                return b""

        async def write(data: bytes) -> None:
            await loop.sock_sendall(conn, data)

        def write_eof() -> None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

        await splice(tunnel, read, write, write_eof)


def _spawn(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _StdinReader:
    """stdin read by a thread of its own: a read blocked there never keeps the process from
    ending (stdin may be a file, a pipe or a socket: not all can be read by the event loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(4)
        self._loop = loop
        threading.Thread(target=self._run, daemon=True, name="stdin").start()

    async def read(self) -> bytes:
        return await self._queue.get()

    def _run(self) -> None:
        fd = sys.stdin.fileno()
        while True:
            try:
                data = os.read(fd, CHUNK)
            except OSError:
                data = b""
            try:  # waits while the queue is full: stdin is read no faster than sent
                asyncio.run_coroutine_threadsafe(self._queue.put(data), self._loop).result()
            except Exception:  # the loop is gone: this process is ending
                return
            if not data:
                return
