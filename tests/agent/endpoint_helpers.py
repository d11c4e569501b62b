"""The in-session endpoint as its tests serve it: stand-ins for what the agent knows
(``Data``) and for its link to the manager (``Link``, which records the calls relayed), and a
call as a session makes it, through its own socket."""

from __future__ import annotations

import os
from typing import Any

import aiohttp

from gpuslice.agent.endpoint import SessionEndpoint


class Data:
    """What the agent would know: two sessions, one measured."""

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        return {"session_id": session_id, "owner": "alice"}

    def usage(self, session_id: str) -> dict[str, Any] | None:
        return {"session_id": session_id, "cpu": 250, "mem": 1024} if session_id == "s1" else None


class Link:
    """Stands in for the manager link: records relayed calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Any]] = []

    async def session_call(self, session_id: str, method: str, path: str, body: Any) -> Any:
        self.calls.append((session_id, method, path, body))
        return {"relayed_for": session_id}


async def call(endpoint: SessionEndpoint, session_id: str, method: str, path: str,
               **kw: Any) -> tuple[int, Any]:
    """``method path`` as session ``session_id`` calls it: its status and its JSON answer."""
    socket = endpoint.socket_path(session_id)  # deeper than a socket address may be: via an fd
    directory = os.open(socket.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        connector = aiohttp.UnixConnector(path=f"/proc/self/fd/{directory}/{socket.name}")
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.request(method, f"http://session{path}", **kw) as response:
                return response.status, await response.json()
    finally:
        os.close(directory)
