"""The fake agent's stream links: it dials back as a node does and plays the apps itself.

On a link it serves what the manager opens, as the real agent's protocol says
(``common.schemas.streams``): an HTTP exchange answered with what reached the "app" (method,
target, headers, body size) as JSON, or a few canned answers by target (``/cookie``,
``/nameless``: nameless cookies, ``/big``,
``/slash``: a redirect to its own URL with a slash added,
``/fail``); a WebSocket that echoes every message; a terminal that echoes input and says each
resize; an SSH stream that echoes its bytes (or, for the image ``no-sshd:1``, the real agent's
refusal). Everything it was opened with is kept in ``agent.opened`` for the test to check.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

if TYPE_CHECKING:
    from tests.manager.fake_agent import FakeAgent

BIG = 5 * 1024 * 1024


async def serve_link(agent: FakeAgent, request: dict[str, Any]) -> None:
    url = f"{agent.ws_url}/api/v1/agents/me/streams/{request['id']}"
    headers = {"Authorization": f"Bearer {agent.credential}"}
    try:
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            while True:
                opened = json.loads(await ws.recv())
                agent.opened.append(opened)
                if opened["op"] == "http":
                    await _http(ws, opened)
                elif opened["op"] == "ssh":
                    await _ssh(ws, opened)
                    return
                elif opened["op"] == "websocket":
                    await ws.send(json.dumps({"op": "opened", "subprotocol": None}))
                    async for message in ws:
                        await ws.send(message)
                    return
                else:
                    await _terminal(ws, opened)
                    return
    except ConnectionClosed:
        return


async def _http(ws: ClientConnection, opened: dict[str, Any]) -> None:
    size = 0
    if opened["body"]:
        while isinstance(chunk := await ws.recv(), bytes):
            size += len(chunk)
    target = opened["target"]
    if target.endswith("/fail"):
        await ws.send(json.dumps({"op": "failed", "status": 502, "code": "app_failed",
                                  "message": "echo failed to start",
                                  "app": {"name": "echo", "state": "failed", "exit_code": 3,
                                          "logs": "oops: no config\n"}}))
        return
    head: list[list[str]] = [["Content-Type", "application/json"]]
    body = json.dumps({"method": opened["method"], "target": target,
                       "headers": opened["headers"], "body": size}).encode()
    if target.endswith("/cookie"):
        head += [["Set-Cookie", "app_session=abc; Path=/; Domain=localhost"],
                 ["Set-Cookie", "gpuslice_login=stolen; Path=/"],
                 ["Set-Cookie", "gpuslice_app=stolen; Path=/"],
                 ["Strict-Transport-Security", "max-age=31536000"],
                 ["Clear-Site-Data", '"cookies"'], ["Service-Worker-Allowed", "/"],
                 ["Location", f"http://localhost:{opened['app']['port']}/small"]]
    if target.endswith("/nameless"):  # cookies a browser would send as `gpuslice_login=…`
        head += [["Set-Cookie", "=gpuslice_login=planted; Path=/"],
                 ["Set-Cookie", " =gpuslice_app=planted"], ["Set-Cookie", "gpuslice_login"],
                 ["Set-Cookie", "app_session=kept; Path=/"]]
    if target.endswith("/slash"):  # an app adding a slash, on its own absolute URL
        head.append(["Location", f"http://localhost:{opened['app']['port']}"
                                 f"{target.removesuffix('/slash')}/"])
    if target.endswith("/big"):
        body = b"x" * BIG
    head.append(["Content-Length", str(len(body))])
    await ws.send(json.dumps({"op": "head", "status": 200, "headers": head}))
    for start in range(0, len(body), 256 * 1024):
        await ws.send(body[start:start + 256 * 1024])
    await ws.send(json.dumps({"op": "end"}))


async def _ssh(ws: ClientConnection, opened: dict[str, Any]) -> None:
    if opened["image"] == "no-sshd:1":
        await ws.send(json.dumps({"op": "failed", "status": 409, "code": "no_ssh_server",
                                  "message": "image no-sshd:1 has no SSH server (sshd)"}))
        return
    await ws.send(json.dumps({"op": "ssh-opened", "user": "work"}))
    async for message in ws:
        await ws.send(message)


async def _terminal(ws: ClientConnection, opened: dict[str, Any]) -> None:
    await ws.send(json.dumps({"op": "attached", "terminal": opened["terminal"] or "t" * 24,
                              "resumed": opened["terminal"] is not None}))
    async for message in ws:
        if isinstance(message, bytes):
            if message == b"exit\n":
                await ws.send(json.dumps({"op": "exit", "code": 4}))
                return
            await ws.send(message)
        else:
            size = json.loads(message)
            await ws.send(f"resized {size['rows']}x{size['cols']}".encode())
