"""A byte stream to a session over the manager's WebSocket: its binary messages are the bytes,
both ways (an SSH connection; any stream that is one TCP-like pipe).

``pipe_stdio`` joins one to this process's stdin and stdout, which is what OpenSSH's
``ProxyCommand`` wants: ``gpuslice ssh-proxy`` is exactly that.
"""

from __future__ import annotations

import os
import threading

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from gpuslice.client.errors import ApiError, error_of

CHUNK = 64 * 1024


class ByteStream:
    """One open stream. ``read()`` is the next bytes (``b""`` at its end)."""

    def __init__(self, connection: ClientConnection) -> None:
        self._ws = connection

    @classmethod
    def open(cls, url: str, token: str | None, *, timeout: float = 60.0) -> ByteStream:
        """Connect; ``ApiError`` with the manager's one-line reason when it refuses."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            ws = connect(url, additional_headers=headers, open_timeout=timeout, max_size=None,
                         compression=None, ping_interval=20, ping_timeout=20).__enter__()
        except InvalidStatus as exc:  # the manager's answer to the upgrade: its reason
            raise error_of(exc.response.status_code, bytes(exc.response.body or b"")) from None
        except (OSError, InvalidURI, WebSocketException, TimeoutError) as exc:
            raise ApiError(f"cannot reach {url}: {exc}", code="unreachable") from None
        return cls(ws)

    def read(self) -> bytes:
        while True:
            try:
                message = self._ws.recv()
            except ConnectionClosed:
                return b""
            if isinstance(message, bytes) and message:
                return message

    def write(self, data: bytes) -> None:
        self._ws.send(data)

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> ByteStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pipe_stdio(stream: ByteStream, stdin: int = 0, stdout: int = 1) -> None:
    """Pass ``stdin``'s bytes to the stream and the stream's to ``stdout`` until either ends
    (OpenSSH ends its side by closing our stdin; the server by closing the stream)."""
    def upstream() -> None:
        try:
            while data := os.read(stdin, CHUNK):
                stream.write(data)
        except (OSError, ConnectionClosed):
            pass
        stream.close()

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while data := stream.read():
            os.write(stdout, data)
    except BrokenPipeError:
        pass
    finally:
        stream.close()

