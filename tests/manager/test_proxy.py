"""The app proxy and its links to agents, against a real server (uvicorn on a port: links and
people's WebSockets are real) and the fake agent, which dials links back and plays the apps.

What the app receives is what the fake agent was opened with (``agent.opened``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from gpuslice.common.images import LABEL_APPS
from gpuslice.manager.db.models import AgentRequestRow, SessionRow
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.manager.conftest import IMAGE, UserFactory, client_for, create
from tests.manager.fake_agent import FakeAgent
from tests.ports import free_port
from tests.waits import scaled

APPS_IMAGE = "apps:1"
APPS = [
    {"name": "echo", "protocol": "http", "port": 8765, "command": ["echo-app", "{port}"]},
    {"name": "notebook", "protocol": "http", "port": 8888, "base_path": True,
     "command": ["nb", "--base={base_path}", "--token={token}", "--port={port}"]},
]


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": database_url},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        apps={"dial_back_timeout": 5},
    )


@pytest.fixture
async def url(app: FastAPI) -> AsyncIterator[str]:
    """The app served by uvicorn on a free port (its lifespan is the `app` fixture's)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning", ws_max_size=64 * 1024**2))
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(scaled(30)):
        while not server.started:
            await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving


async def node(app: FastAPI, admin: httpx.AsyncClient, url: str, name: str = "node-1",
               dials: bool = True) -> FakeAgent:
    r = await admin.post("/api/v1/join-tokens", json={"name": f"join-{name}"})
    details = [{"tag": APPS_IMAGE, "image_id": "sha256:" + "1" * 64, "size": 1,
                "labels": {LABEL_APPS: json.dumps(APPS)}}]
    agent = FakeAgent(client_for(app), r.json()["token"], name, images=[APPS_IMAGE],
                      image_details=details, ws_url="ws" + url.removeprefix("http") if dials
                      else None)
    await agent.start()
    return agent


@pytest.fixture
async def agent(app: FastAPI, admin: httpx.AsyncClient, url: str) -> AsyncIterator[FakeAgent]:
    running = await node(app, admin, url)
    yield running
    await running.stop()


async def running(client: httpx.AsyncClient, image: str = APPS_IMAGE) -> str:
    [session] = await create(client, image=image, resources={"cpu": 1, "mem": "1g"})
    for _ in range(600):
        r = await client.get(f"/api/v1/sessions/{session['id']}")
        if r.json()["status"] == "RUNNING":
            return str(session["id"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"not RUNNING: {r.json()}")


async def token_of(client: httpx.AsyncClient) -> str:
    return str(client.headers["Authorization"].split()[1])


def sent(opened: dict[str, Any]) -> dict[str, str]:
    return dict(opened["headers"])


async def upgrade(url: str, headers: dict[str, str]) -> int:
    try:
        async with connect(url, additional_headers=headers, max_size=None):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


# ------------------------------------------------------------------ HTTP


async def test_http_reaches_the_app_without_our_credentials(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    token = await token_of(admin)
    async with httpx.AsyncClient(base_url=url) as web:
        r = await web.get(f"/s/{sid}/echo/headers?x=1", headers={
            "Authorization": f"Bearer {token}", "Cookie": "theirs=1; gpuslice_login=abc"})
        assert r.status_code == 200, r.text
        got = r.json()
        headers = sent(agent.opened[-1])
        assert (got["method"], got["target"]) == ("GET", "/headers?x=1")  # prefix stripped
        assert "Authorization" not in headers and headers["Cookie"] == "theirs=1"
        assert headers["Host"] == "localhost:8765"
        assert headers["X-Forwarded-Prefix"] == f"/s/{sid}/echo"
        assert agent.opened[-1]["app"]["command"] == ["echo-app", "8765"]

        r = await web.get(f"/s/{sid}/notebook/api?x=1", headers={
            "Authorization": f"Bearer {token}"})
        assert r.json()["target"] == f"/s/{sid}/notebook/api?x=1"  # the app knows its prefix
        [app_token] = [v for k, v in agent.opened[-1]["headers"] if k == "Authorization"]
        assert app_token.startswith("token ") and len(app_token) == len("token ") + 48
        assert agent.opened[-1]["app"]["command"] == [
            "nb", f"--base=/s/{sid}/notebook", f"--token={app_token.split()[1]}", "--port=8888"]
        # three requests, one link: it went back to the pool each time
        assert (await web.get(f"/s/{sid}/echo/", headers={
            "Authorization": f"Bearer {token}"})).status_code == 200
    assert len(agent.links) == 1
    assert (await admin.get(f"/api/v1/sessions/{sid}")).status_code == 200
    async with app.state.sessionmaker() as db:  # people's app traffic is use of the session
        for _ in range(50):
            if (await db.get(SessionRow, sid, populate_existing=True)).last_activity_at:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no activity recorded")


async def test_cookies_and_redirects_of_an_app_stay_under_its_path(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    async with httpx.AsyncClient(base_url=url, headers=auth) as web:
        r = await web.get(f"/s/{sid}/echo/cookie")
        assert r.headers.get_list("set-cookie") == [f"app_session=abc; Path=/s/{sid}/echo/"]
        assert r.headers["location"] == f"/s/{sid}/echo/small"
        for origin_wide in ("strict-transport-security", "clear-site-data",
                            "service-worker-allowed"):
            assert origin_wide not in r.headers
        big = await web.get(f"/s/{sid}/echo/big")
        assert len(big.content) == 5 * 1024 * 1024
        posted = await web.post(f"/s/{sid}/echo/upload", content=b"y" * (3 * 1024 * 1024))
        assert posted.json()["body"] == 3 * 1024 * 1024
        failed = await web.get(f"/s/{sid}/echo/fail")
        assert failed.status_code == 502 and failed.json()["code"] == "app_failed"
        assert "(exit code 3)" in failed.json()["message"]
        assert "oops: no config" in failed.json()["message"]


# ------------------------------------------------------------------ WebSockets


async def test_websockets_relay_big_messages_and_terminals_their_bytes(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    ws_base = "ws" + url.removeprefix("http")
    async with connect(f"{ws_base}/s/{sid}/notebook/api/kernels/k/channels",
                       additional_headers=auth, max_size=None) as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        big = b"z" * (5 * 1024 * 1024)  # one 5 MiB message: no 1 MiB cap on the way
        await ws.send(big)
        assert await ws.recv() == big
    assert agent.opened[-1]["op"] == "websocket"

    async with connect(f"{ws_base}/api/v1/sessions/{sid}/terminal?rows=30&cols=90",
                       additional_headers=auth) as term:
        attached = json.loads(await term.recv())
        assert attached["op"] == "attached" and attached["resumed"] is False
        assert (agent.opened[-1]["rows"], agent.opened[-1]["cols"]) == (30, 90)
        assert agent.opened[-1]["keep_ms"] == 60_000
        await term.send(b"ls\n")
        assert await term.recv() == b"ls\n"
        await term.send(json.dumps({"op": "resize", "rows": 50, "cols": 200}))
        assert await term.recv() == b"resized 50x200"
        await term.send(b"exit\n")
        assert json.loads(await term.recv()) == {"op": "exit", "code": 4}
    async with connect(f"{ws_base}/api/v1/sessions/{sid}/terminal?terminal={'t' * 24}",
                       additional_headers=auth) as term:
        assert json.loads(await term.recv())["resumed"] is True
        await term.send("not a resize")
        with pytest.raises(Exception, match="1003"):
            await term.recv()


# ------------------------------------------------------------------ who may


async def test_refusals_are_http_answers_never_an_upgrade(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, make_user: UserFactory
) -> None:
    sid = await running(admin)
    ws_base = "ws" + url.removeprefix("http")
    paths = [f"{ws_base}/s/{sid}/echo/ws", f"{ws_base}/api/v1/sessions/{sid}/terminal"]
    login_answer = await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": _admin_password(app)})
    cookie = login_answer.cookies["gpuslice_login"]
    bob = await make_user("bob")
    async with httpx.AsyncClient(base_url=url) as web:
        assert (await web.get(f"/s/{sid}/echo/x")).status_code == 401
        other = {"Authorization": f"Bearer {await token_of(bob)}"}
        assert (await web.get(f"/s/{sid}/echo/x", headers=other)).status_code == 404
        foreign = {"Cookie": f"gpuslice_login={cookie}", "Origin": "http://evil.example"}
        assert (await web.post(f"/s/{sid}/echo/x", headers=foreign)).status_code == 403
        assert (await web.get(f"/s/{sid}/echo/x", headers=foreign)).status_code == 200
        same = {"Cookie": f"gpuslice_login={cookie}", "Origin": url}
        assert (await web.post(f"/s/{sid}/echo/x", headers=same)).status_code == 200
        unknown = await web.get(f"/s/{sid}/nope/", headers=same)
        assert unknown.status_code == 404 and "its apps: terminal, echo, notebook" in unknown.text
    for path in paths:
        assert await upgrade(path, {}) == 401
        assert await upgrade(path, other) == 404
        assert await upgrade(path, foreign) == 403
        assert await upgrade(path, {"Cookie": f"gpuslice_login={cookie}"}) == 403  # no Origin
    assert await upgrade(paths[1], same) == 101

    # bob's session: the admin sees it, but opens its apps only with apps.admin_access
    bobs = await running(bob)
    admin_auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    async with httpx.AsyncClient(base_url=url, headers=admin_auth) as web:
        refused = await web.get(f"/s/{bobs}/echo/x")
        assert refused.status_code == 403 and refused.json()["code"] == "not_owner"
        assert await upgrade(f"{ws_base}/api/v1/sessions/{bobs}/terminal", admin_auth) == 403
        app.state.settings.apps.admin_access = True
        try:
            assert (await web.get(f"/s/{bobs}/echo/x")).status_code == 200
        finally:
            app.state.settings.apps.admin_access = False


def _admin_password(app: FastAPI) -> str:
    text = (app.state.settings.data_dir / "admin-credentials").read_text()
    return dict(line.split(": ", 1) for line in text.splitlines())["password"]


async def test_a_session_not_running_has_no_apps_yet(
    url: str, admin: httpx.AsyncClient
) -> None:
    [queued] = await create(admin, image=IMAGE, resources={"cpu": 1})  # no node: PENDING
    async with httpx.AsyncClient(base_url=url, headers=admin.headers) as web:
        r = await web.get(f"/s/{queued['id']}/terminal/")
        assert r.status_code == 409 and r.json()["code"] == "not_running"


# ------------------------------------------------------------------ the channel's rules


async def test_only_the_addressed_node_dials_back_and_only_once(
    app: FastAPI, url: str, admin: httpx.AsyncClient
) -> None:
    quiet = await node(app, admin, url, "node-1", dials=False)
    sid = await running(admin)
    other = await node(app, admin, url, "node-2", dials=False)  # after: the session is quiet's
    try:
        auth = {"Authorization": f"Bearer {await token_of(admin)}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=30) as web:
            asking = asyncio.create_task(web.get(f"/s/{sid}/echo/small"))
            # delivered before it expires (apps.dial_back_timeout)
            async with asyncio.timeout(scaled(5)):
                while not quiet.links:
                    await asyncio.sleep(0.02)
            [request] = quiet.links
            assert request["ask"]["kind"] == "stream" and request["session_id"] == sid
            link = f"{'ws' + url.removeprefix('http')}/api/v1/agents/me/streams/{request['id']}"
            assert await upgrade(link, {"Authorization": f"Bearer {other.credential}"}) == 404
            assert await upgrade(link, {}) == 401
            mine = {"Authorization": f"Bearer {quiet.credential}"}
            async with connect(link, additional_headers=mine) as ws:
                assert await upgrade(link, mine) == 404  # once
                opened = json.loads(await ws.recv())
                assert opened["op"] == "http" and opened["target"] == "/small"
                await ws.send(json.dumps({"op": "head", "status": 200, "headers": []}))
                await ws.send(b"fine")
                await ws.send(json.dumps({"op": "end"}))
                assert (await asking).text == "fine"
    finally:
        await quiet.stop()
        await other.stop()


async def test_an_agent_that_does_not_dial_back_is_a_timeout(
    app: FastAPI, url: str, admin: httpx.AsyncClient
) -> None:
    silent = await node(app, admin, url, dials=False)
    try:
        sid = await running(admin)
        async with httpx.AsyncClient(base_url=url, headers=admin.headers, timeout=30) as web:
            r = await web.get(f"/s/{sid}/echo/small")
        assert r.status_code == 504 and r.json()["code"] == "agent_timeout"
        [request] = silent.links
        link = f"{'ws' + url.removeprefix('http')}/api/v1/agents/me/streams/{request['id']}"
        late = {"Authorization": f"Bearer {silent.credential}"}
        assert await upgrade(link, late) == 404  # expired: nobody waits for it
        async with app.state.sessionmaker() as db:
            assert await db.get(AgentRequestRow, request["id"]) is None
    finally:
        await silent.stop()


# ------------------------------------------------------------------ the terminal's page


async def test_the_terminal_page_loads_xterm_from_the_manager(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    async with httpx.AsyncClient(base_url=url, headers=admin.headers) as web:
        page = await web.get(f"/s/{sid}/terminal/")
        assert page.status_code == 200, "the browser terminal is not built: tools/build-web.sh"
        assert f'data-session="{sid}"' in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert f"connect-src 'self' ws://{url.removeprefix('http://')}" in policy
        for asset in ("/assets/terminal.js", "/assets/vendor/xterm.js",
                      "/assets/vendor/addon-fit.js", "/assets/vendor/xterm.css"):
            assert (await web.get(asset)).status_code == 200, asset
            assert f'"{asset}"' in page.text or f"={asset}>" in page.text
