"""The floors the proxy benchmarks measure beside the platform: what one hop written in Python
costs on this machine, with the libraries the platform itself uses, and nothing else (no login,
no routing, no link to an agent). A figure far above its floor is overhead of our own; one near
it is what a Python hop costs, whatever the code does.

    python bench/_floors.py http PORT URL        a reverse proxy on 127.0.0.1:PORT to URL
    python bench/_floors.py tcp PORT HOST:PORT   a TCP relay on 127.0.0.1:PORT to HOST:PORT

``http``: uvicorn with httptools on uvloop (the manager's server) passing each request to the
app by aiohttp's client on one kept-alive connection pool (the agent's), the answer streamed
back. ``tcp``: asyncio protocols on uvloop, each side's bytes written to the other as they
arrive, reading paused while the other side's buffer is full (a relay's least work per byte).
Each prints ``ready`` on stdout once it listens.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
import uvloop

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade", "te",
                        "trailer", "proxy-connection"})
NOT_PASSED_ON = HOP_BY_HOP | {"host", "content-length"}  # the client sets its own
CHUNK = 256 * 1024


@contextmanager
def running(kind: str, target: str) -> Iterator[int]:
    """A floor (``http`` or ``tcp``, to ``target``) in a process of its own, listening on the
    port given; stopped on leaving."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    proc = subprocess.Popen([sys.executable, str(Path(__file__)), kind, str(port), target],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"the {kind} floor did not start: {line!r}")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def http_floor(port: int, upstream: str) -> None:
    client: aiohttp.ClientSession | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal client
        if scope["type"] != "http":
            return
        if client is None:
            client = aiohttp.ClientSession(auto_decompress=False)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope["raw_path"].decode() + (
            "?" + scope["query_string"].decode() if scope["query_string"] else "")
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]
                   if k.decode() not in NOT_PASSED_ON]
        async with client.request(scope["method"], upstream + target, headers=headers,
                                  data=body or None, allow_redirects=False,
                                  skip_auto_headers=("Accept", "Accept-Encoding",
                                                     "User-Agent")) as answer:
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": [(k.lower(), v) for k, v in answer.raw_headers
                                    if k.lower().decode() not in HOP_BY_HOP]})
            async for chunk in answer.content.iter_chunked(CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                            lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await serving

    uvloop.run(main())


class _Side(asyncio.Protocol):
    """One side of a relayed connection: what it reads is written to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # read before the peer connected
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.pending.append(data)
            return
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write_eof()
        return True  # half-closed: the other way goes on

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # Flow control: our transport's buffer is full, so stop reading the peer.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def join(self, peer: _Side) -> None:
        """Pair with ``peer``; what either read before is passed on now."""
        self.peer, peer.peer = peer, self
        for side in (self, peer):
            assert side.peer is not None and side.peer.transport is not None
            for data in side.pending:
                side.peer.transport.write(data)
            side.pending.clear()
            if side.eof:
                side.peer.transport.write_eof()


def tcp_floor(port: int, host: str, upstream_port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        def accepted() -> _Side:
            near = _Side()
            loop.create_task(connect(near))
            return near

        async def connect(near: _Side) -> None:
            try:
                _, far = await loop.create_connection(_Side, host, upstream_port)
            except OSError:
                if near.transport is not None:
                    near.transport.close()
                return
            near.join(far)

        server = await loop.create_server(accepted, "127.0.0.1", port)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


if __name__ == "__main__":
    kind, listen, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind == "http":
        http_floor(listen, target.rstrip("/"))
    else:
        address, _, number = target.rpartition(":")
        tcp_floor(listen, address, int(number))
