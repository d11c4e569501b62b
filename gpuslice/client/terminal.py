"""A session's terminal from Python: a shell in the session, over the manager's WebSocket.

    with client.terminal("train-1", rows=40, cols=120) as term:
        term.write(b"nvidia-smi\\n")
        while (data := term.read(timeout=5)) is not None:
            print(data.decode(errors="replace"), end="")
    print(term.exit_code)

Bytes go both ways as they are (the shell runs on a TTY: its echo and prompts come back too).
``term.id`` names the terminal: :meth:`Client.terminal` with ``terminal=term.id`` within a minute
of a dropped connection reattaches to the same shell, its recent output replayed.
"""

from __future__ import annotations

import json
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from gpuslice.client.errors import ApiError


class Terminal:
    """One connection to a session's terminal. Use as a context manager."""

    def __init__(self, connection: ClientConnection, attached: dict[str, Any]) -> None:
        self._ws = connection
        self.id: str = attached["terminal"]
        self.resumed: bool = bool(attached.get("resumed"))
        self.exit_code: int | None = None  # the shell's, once it exited

    @classmethod
    def open(cls, url: str, token: str | None, *, rows: int, cols: int,
             terminal: str | None = None, timeout: float = 30.0) -> Terminal:
        """Connect to ``url`` (the terminal's WebSocket); ``ApiError`` with the manager's
        reason when it refuses."""
        query = f"?rows={rows}&cols={cols}" + (f"&terminal={terminal}" if terminal else "")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            ws = connect(url + query, additional_headers=headers, open_timeout=timeout,
                         max_size=None, compression=None, ping_interval=20,
                         ping_timeout=20).__enter__()  # closed by close()
        except InvalidStatus as exc:
            raise _refusal(exc) from None
        except (OSError, InvalidURI, WebSocketException, TimeoutError) as exc:
            raise ApiError(f"cannot reach the terminal at {url}: {exc}",
                           code="unreachable") from None
        try:
            attached = json.loads(ws.recv(timeout=timeout))
        except (ConnectionClosed, TimeoutError, ValueError) as exc:
            ws.close()
            raise ApiError(f"the terminal did not open: {exc}", code="unreachable") from None
        return cls(ws, attached)

    def write(self, data: bytes) -> None:
        """Keystrokes (or any bytes) for the shell."""
        try:
            self._ws.send(data)
        except ConnectionClosed:
            pass  # read() says how it ended

    def resize(self, rows: int, cols: int) -> None:
        try:
            self._ws.send(json.dumps({"op": "resize", "rows": rows, "cols": cols}))
        except ConnectionClosed:
            pass

    def read(self, timeout: float | None = None) -> bytes | None:
        """The shell's next output; ``b""`` when ``timeout`` passed without any, ``None`` once
        the terminal ended (``exit_code`` is set when the shell exited, ``None`` when the
        connection was lost: reconnect with ``terminal=self.id``)."""
        while True:
            try:
                message = self._ws.recv(timeout=timeout)
            except TimeoutError:
                return b""
            except ConnectionClosed:
                return None
            if isinstance(message, bytes):
                return message
            control = json.loads(message)
            if control.get("op") == "exit":
                self.exit_code = int(control.get("code", -1))

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refusal(exc: InvalidStatus) -> ApiError:
    response = exc.response
    try:
        body = json.loads(response.body or b"{}")
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return ApiError(message or f"the manager refused the terminal (HTTP {response.status_code})",
                    status=response.status_code,
                    code=body.get("code", "error") if isinstance(body, dict) else "error")
