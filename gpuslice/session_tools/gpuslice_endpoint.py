"""The in-session endpoint, from inside a session: a few calls to the node's agent over the Unix
socket it serves for this session alone (``$GPUSLICE_ENDPOINT``).

The agent knows which session calls by the socket, so a call carries no credential and can
never act for another session. Standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any, BinaryIO

DEFAULT_SOCKET = "/run/gpuslice/agent.sock"


class EndpointError(Exception):
    """The endpoint refused a call or cannot be reached; ``str()`` says why. ``status``: the
    endpoint's HTTP status (None: the agent did not answer), ``code``: its error code."""

    def __init__(
        self, message: str, status: int | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    @property
    def platform_away(self) -> bool:
        """The platform cannot answer now (the node's agent or the manager is stopped or
        unreachable), as opposed to refusing the call: worth trying again later."""
        return self.status is None or self.status >= 500


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def call(method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    """``method path`` on the endpoint with an optional JSON body; the JSON answer."""
    payload = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    return _send(method, path, payload, headers, timeout)


def send_file(method: str, path: str, source: BinaryIO, size: int,
              timeout: float = 300.0) -> Any:
    """``method path`` with the ``size`` bytes of the open file ``source`` as the body, sent as
    they are read (any size; never in memory whole); the JSON answer."""
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    return _send(method, path, source, headers, timeout)


def _send(method: str, path: str, body: Any, headers: dict[str, str], timeout: float) -> Any:
    where = os.environ.get("GPUSLICE_ENDPOINT", DEFAULT_SOCKET)
    connection = _UnixConnection(where, timeout)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
    except OSError as exc:
        raise EndpointError(f"the node's agent does not answer on {where} ({exc})") from None
    finally:
        connection.close()
    try:
        answer = json.loads(data) if data else None
    except ValueError:
        raise EndpointError(f"the endpoint answered {response.status} with no JSON",
                            response.status) from None
    if response.status >= 400:
        found = answer if isinstance(answer, dict) else {}
        raise EndpointError(found.get("message") or f"the endpoint answered {response.status}",
                            response.status, found.get("code"))
    return answer
