"""The app proxy and its links to agents, against a real server (uvicorn on a port: links and
people's WebSockets are real) and the fake agent, which dials links back and plays the apps.

What the app receives is what the fake agent was opened with (``agent.opened``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import func, select, update
from websockets.asyncio.client import connect

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import AgentRequestRow, AppEntryRow, SessionRow
from gpuslice.manager.loop_table import run_once
from tests.manager.conftest import IMAGE, UserFactory, create
from tests.manager.fake_agent import FakeAgent
from tests.manager.helpers import wait_status
from tests.manager.proxy_helpers import (
    admin_password,
    agent,
    at,
    node,
    on,
    running,
    sent,
    settings,
    token_of,
    upgrade,
    url,
)
from tests.ports import free_port
from tests.waits import Deadline, scaled

__all__ = ["agent", "settings", "url"]  # the fixtures, for this module's tests


# ------------------------------------------------------------------ HTTP


async def test_http_reaches_the_app_at_its_origin_without_our_credentials(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    token = await token_of(admin)
    bearer = f"Bearer {token}"
    async with httpx.AsyncClient(base_url=url) as web:
        r = await web.get("/headers?x=1", headers=on(url, sid, "echo", Authorization=bearer,
                          Cookie="theirs=1; gpuslice_login=abc; gpuslice_app=def"))
        assert r.status_code == 200, r.text
        got = r.json()
        headers = sent(agent.opened[-1])
        assert (got["method"], got["target"]) == ("GET", "/headers?x=1")  # at its root
        assert "Authorization" not in headers and headers["Cookie"] == "theirs=1"
        assert headers["Host"] == "localhost:8765" and "X-Forwarded-Prefix" not in headers
        assert headers["X-Forwarded-Host"] == at(url, sid, "echo")
        assert agent.opened[-1]["app"]["command"] == ["echo-app", "8765"]

        r = await web.get("/api?x=1", headers=on(url, sid, "notebook", Authorization=bearer))
        assert r.json()["target"] == "/api?x=1"
        [app_token] = [v for k, v in agent.opened[-1]["headers"] if k == "Authorization"]
        assert app_token.startswith("token ") and len(app_token) == len("token ") + 48
        assert agent.opened[-1]["app"]["command"] == [  # its base path: its origin's root
            "nb", "--base=/", f"--token={app_token.split()[1]}", "--port=8888"]
        # a port number is an app too: whatever listens on it, started by nobody
        r = await web.get("/", headers=on(url, sid, "8123", Authorization=bearer))
        assert r.status_code == 200 and agent.opened[-1]["app"] == {
            "name": "port-8123", "port": 8123, "command": [], "start_timeout_ms": 60000}
        # three requests, one link: it went back to the pool each time
        assert (await web.get("/", headers=on(url, sid, "echo", Authorization=bearer))
                ).status_code == 200
    assert len(agent.links) == 1
    assert (await admin.get(f"/api/v1/sessions/{sid}")).status_code == 200
    async with app.state.sessionmaker() as db:  # people's app traffic is use of the session
        deadline = Deadline(5)
        while not (await db.get(SessionRow, sid, populate_existing=True)).last_activity_at:
            assert not deadline.passed, "no activity recorded"
            await asyncio.sleep(0.1)


async def test_cookies_of_an_app_stay_on_its_origin(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    auth = on(url, sid, "echo", Authorization=f"Bearer {await token_of(admin)}")
    async with httpx.AsyncClient(base_url=url, headers=auth) as web:
        r = await web.get("/cookie")
        # host-only (no Domain): never sent to another app or the manager; ours are dropped
        assert r.headers.get_list("set-cookie") == ["app_session=abc; Path=/"]
        assert r.headers["location"] == "/small"
        big = await web.get("/big")
        assert len(big.content) == 5 * 1024 * 1024
        posted = await web.post("/upload", content=b"y" * (3 * 1024 * 1024))
        assert posted.json()["body"] == 3 * 1024 * 1024
        failed = await web.get("/fail")
        assert failed.status_code == 502 and failed.json()["code"] == "app_failed"
        assert "(exit code 3)" in failed.json()["message"]
        assert "oops: no config" in failed.json()["message"]


async def test_an_app_cannot_plant_our_login_by_a_nameless_cookie(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    """Security review F7: a browser sends a nameless cookie as its value alone, so an app's
    ``Set-Cookie: =gpuslice_login=<bob's login>`` reached the manager, on a host shared with
    it (app ports), as a second login cookie, and the last one won."""
    sid = await running(admin)
    auth = on(url, sid, "echo", Authorization=f"Bearer {await token_of(admin)}")
    async with httpx.AsyncClient(headers=auth) as web:
        r = await web.get(f"{url}/nameless")
        assert r.headers.get_list("set-cookie") == ["app_session=kept; Path=/"]
    login = (await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": admin_password(app)})).cookies["gpuslice_login"]
    twice = {"Cookie": f"gpuslice_login={login}; theirs=1; gpuslice_login=planted"}
    async with httpx.AsyncClient(base_url=url) as web:
        api = await web.get("/api/v1/sessions", headers=twice)
        assert api.status_code == 401 and api.json()["code"] == "login_cookie_twice"
        assert "clear this site's cookies" in api.json()["message"]
        # pages say so too, rather than send the browser to log in again (it would be back)
        for path in ("/", f"/s/{sid}/echo/"):
            page = await web.get(path, headers={**twice, "Accept": "text/html"})
            assert page.status_code == 401, path
            assert "sent 2 gpuslice_login cookies" in page.text, path
        assert (await web.get("/api/v1/sessions", headers={
            "Cookie": f"theirs=1; gpuslice_login={login}"})).status_code == 200


async def test_a_redirect_to_the_apps_own_url_stays_on_its_origin(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    # http://localhost:<port>//evil.example/ is a path of the app's; as '//evil.example/' it
    # was another site: a link to the app's origin led wherever its path said
    sid = await running(admin)
    auth = on(url, sid, "echo", Authorization=f"Bearer {await token_of(admin)}")
    async with httpx.AsyncClient(headers=auth) as web:
        for path, moved in (("/docs/slash", "/docs/"), ("//evil.example/slash", "/evil.example/"),
                            ("/%5Cevil.example/slash", "/%5Cevil.example/"),
                            ("/\\evil.example/slash", "/evil.example/")):
            r = await web.get(httpx.URL(url + path))
            assert r.headers["location"] == moved, path


async def _raw(port: int, request: bytes) -> bytes:
    """A request as bytes, the answer's head and body as the server wrote them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    async with asyncio.timeout(scaled(30)):
        answer = await reader.read()
    writer.close()
    return answer


async def test_a_request_target_that_is_not_a_path_never_reaches_the_agent(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    """Security review F6: h11 (uvicorn's parser where httptools is missing, or
    ``--http h11``) passes ``GET @host/… HTTP/1.1`` on, and the agent pasted that target
    after the app's ``host:port``: a request from the node to any host."""
    sid = await running(admin)
    token = await token_of(admin)
    port = free_port()
    h11 = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                        log_level="warning", http="h11"))
    serving = asyncio.create_task(h11.serve())
    try:
        async with asyncio.timeout(scaled(30)):
            while not h11.started:
                await asyncio.sleep(0.01)
        host = f"echo--{sid}.apps.localhost:{port}"
        for method, target in (("GET", "@169.254.169.254/latest/meta-data/"),
                               ("GET", "http://169.254.169.254/"), ("OPTIONS", "*")):
            answer = await _raw(port, (
                f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}"
                "\r\nConnection: close\r\n\r\n").encode())
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), (target, answer[:300])
            refused = json.loads(body)
            assert refused["code"] == "bad_target" and "is not a path" in refused["message"]
        assert agent.opened == []
        ok = await _raw(port, (f"GET /fine HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                               f"{token}\r\nConnection: close\r\n\r\n").encode())
        assert ok.startswith(b"HTTP/1.1 200 ") and agent.opened[-1]["target"] == "/fine"
    finally:
        h11.should_exit = True
        await serving


# ------------------------------------------------------------------ WebSockets


async def test_websockets_relay_big_messages_and_terminals_their_bytes(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    ws_base = "ws" + url.removeprefix("http")
    async with connect(f"ws://{at(url, sid, 'notebook')}/api/kernels/k/channels",
                       additional_headers=auth, max_size=None, host="127.0.0.1") as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        big = b"z" * (5 * 1024 * 1024)  # one 5 MiB message: no 1 MiB cap on the way
        await ws.send(big)
        assert await ws.recv() == big
    assert agent.opened[-1]["op"] == "websocket"
    assert agent.opened[-1]["target"] == "/api/kernels/k/channels"
    # the old path names where the app is now
    assert await upgrade(f"{ws_base}/s/{sid}/notebook/api/kernels/k/channels", auth) == 404

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
    echo = at(url, sid, "echo")
    paths = [f"ws://{echo}/ws", f"{ws_base}/api/v1/sessions/{sid}/terminal"]
    login_answer = await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": admin_password(app)})
    cookie = login_answer.cookies["gpuslice_login"]
    app_cookie = await enter(url, sid, "echo", cookie)
    bob = await make_user("bob")
    other = {"Authorization": f"Bearer {await token_of(bob)}"}
    async with httpx.AsyncClient(base_url=url, headers={"Host": echo}) as web:
        assert (await web.get("/x")).status_code == 401
        # the manager's login cookie is no key to an app's origin
        assert (await web.get("/x", headers={"Cookie": f"gpuslice_login={cookie}"})
                ).status_code == 401
        assert (await web.get("/x", headers=other)).status_code == 404
        foreign = {"Cookie": f"gpuslice_app={app_cookie}", "Origin": "http://evil.example"}
        assert (await web.post("/x", headers=foreign)).status_code == 403
        assert (await web.get("/x", headers=foreign)).status_code == 200
        same = {"Cookie": f"gpuslice_app={app_cookie}", "Origin": f"http://{echo}"}
        assert (await web.post("/x", headers=same)).status_code == 200
        # another app's origin, and the manager's API, do not take it
        assert (await web.get("/x", headers={**same, "Host": at(url, sid, "notebook")})
                ).status_code == 401
        assert (await web.get("/api/v1/sessions", headers={**same, "Host": "127.0.0.1"})
                ).status_code == 401
        unknown = await web.get(f"/s/{sid}/nope/", headers={
            "Host": "127.0.0.1", "Cookie": f"gpuslice_login={cookie}"})
        assert unknown.status_code == 404 and "its apps: terminal, echo, notebook" in unknown.text
    terminal_same = {"Cookie": f"gpuslice_login={cookie}", "Origin": url}
    for path, same in ((paths[0], {"Cookie": f"gpuslice_app={app_cookie}",
                                   "Origin": f"http://{echo}"}), (paths[1], terminal_same)):
        assert await upgrade(path, {}) == 401
        assert await upgrade(path, other) == 404
        assert await upgrade(path, {**same, "Origin": "http://evil.example"}) == 403
        assert await upgrade(path, {"Cookie": same["Cookie"]}) == 403  # no Origin
        assert await upgrade(path, same) == 101

    # bob's session: the admin sees it, but opens its apps only with apps.admin_access
    bobs = await running(bob)
    admin_auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    async with httpx.AsyncClient(base_url=url, headers=admin_auth) as web:
        refused = await web.get("/x", headers={"Host": at(url, bobs, "echo")})
        assert refused.status_code == 403 and refused.json()["code"] == "not_owner"
        assert await upgrade(f"{ws_base}/api/v1/sessions/{bobs}/terminal", admin_auth) == 403
        app.state.settings.apps.admin_access = True
        try:
            assert (await web.get("/x", headers={"Host": at(url, bobs, "echo")})
                    ).status_code == 200
        finally:
            app.state.settings.apps.admin_access = False


# A WebSocket upgrade as plain HTTP, so that a refusal's JSON body can be read.
UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


async def test_a_port_that_is_not_a_number_is_a_one_line_422(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    # '²' and '٥' are digits to str.isdigit() but not to int(): that was a 500 and a traceback
    sid = await running(admin)
    ws = "ws" + url.removeprefix("http") + f"/api/v1/sessions/{sid}/ports/"
    auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    for port in ("%C2%B2", "%D9%A5%D9%A0%D9%A0%D9%A0", "0", "65536", "x"):
        assert await upgrade(ws + port, auth) == 422, port
    async with httpx.AsyncClient(base_url=url, headers=auth) as web:
        r = await web.get(f"/api/v1/sessions/{sid}/ports/%C2%B2", headers=UPGRADE)
    assert r.status_code == 422 and r.json()["code"] == "bad_port", r.text
    assert r.json()["message"] == "'²' is not a port: a port is a number from 1 to 65535"


async def test_a_terminal_asked_with_a_bad_size_is_a_one_line_422(
    url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    # FastAPI's own answer to a WebSocket's bad query was a bare 403, as if it were not hers
    sid = await running(admin)
    ws = "ws" + url.removeprefix("http") + f"/api/v1/sessions/{sid}/terminal"
    auth = {"Authorization": f"Bearer {await token_of(admin)}"}
    for query in ("?rows=0", "?cols=abc", "?terminal=..%2Fx"):
        assert await upgrade(ws + query, auth) == 422, query
    async with httpx.AsyncClient(base_url=url, headers=auth) as web:
        r = await web.get(f"/api/v1/sessions/{sid}/terminal?rows=0", headers=UPGRADE)
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    assert r.json()["field"] == "rows" and "\n" not in r.json()["message"]


async def enter(url: str, sid: str, name: str, login_cookie: str) -> str:
    """What a browser does: the manager's origin hands the login over by a code, the app's
    origin trades it for its own cookie (returned)."""
    async with httpx.AsyncClient(base_url=url) as web:
        r = await web.get(f"/s/{sid}/{name}/tree?a=1", headers={
            "Cookie": f"gpuslice_login={login_cookie}", "Accept": "text/html"})
        assert r.status_code == 303, r.text
        location = httpx.URL(r.headers["location"])
        assert f"{location.host}:{location.port}" == at(url, sid, name)
        assert location.path == "/_gpuslice/enter" and location.params["next"] == "/tree?a=1"
        entered = await web.get(f"/_gpuslice/enter?{location.query.decode()}",
                                headers={"Host": at(url, sid, name)})
        assert entered.status_code == 303 and entered.headers["location"] == "/tree?a=1"
        set_cookie = entered.headers["set-cookie"]
        assert "httponly" in set_cookie.lower() and "samesite=lax" in set_cookie.lower()
        assert "domain" not in set_cookie.lower()  # host-only
        again = await web.get(f"/_gpuslice/enter?{location.query.decode()}",
                              headers={"Host": at(url, sid, name)})
        assert again.status_code == 422 and again.json()["code"] == "enter_code_invalid"
        return str(entered.cookies["gpuslice_app"])


async def test_a_browser_enters_an_app_origin_by_a_single_use_code(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    sid = await running(admin)
    login_answer = await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": admin_password(app)})
    cookie = login_answer.cookies["gpuslice_login"]
    app_cookie = await enter(url, sid, "echo", cookie)
    echo = at(url, sid, "echo")
    async with httpx.AsyncClient(base_url=url) as web:
        page = await web.get("/headers", headers={"Host": echo,
                                                  "Cookie": f"gpuslice_app={app_cookie}"})
        assert page.status_code == 200 and page.json()["target"] == "/headers"
        # not logged in on this origin: back to the manager's, which hands the login over
        bounced = await web.get("/lab?x=1", headers={"Host": echo, "Accept": "text/html"})
        assert bounced.status_code == 303
        assert bounced.headers["location"] == f"http://localhost:{url.rsplit(':', 1)[1]}" \
            f"/s/{sid}/echo/lab?x=1"
        # a code for one app does not open another
        r = await web.get(f"/s/{sid}/echo/", headers={
            "Cookie": f"gpuslice_login={cookie}", "Accept": "text/html"})
        query = httpx.URL(r.headers["location"]).query.decode()
        wrong = await web.get(f"/_gpuslice/enter?{query}",
                              headers={"Host": at(url, sid, "notebook")})
        assert wrong.status_code == 422
        # a program's old path is a redirect to the origin, where it sends its token itself
        moved = await web.get(f"/s/{sid}/echo/a?b=1", headers=admin.headers)
        assert moved.status_code == 307 and moved.headers["location"] == f"http://{echo}/a?b=1"
        # a logout ends the app's login too
        await web.post("/api/v1/auth/logout", headers={
            "Cookie": f"gpuslice_login={cookie}", "Origin": url})
        app.state.gate._known.clear()  # the proxy's few seconds of memory (apps.auth_cache)
        gone = await web.get("/headers", headers={"Host": echo,
                                                  "Cookie": f"gpuslice_app={app_cookie}"})
        assert gone.status_code == 401
    # the listing names each app's origin
    listed = (await admin.get(f"/api/v1/sessions/{sid}/apps")).json()["apps"]
    urls = {a["name"]: a["url"] for a in listed}
    assert urls["echo"] == f"http://echo--{sid}.apps.localhost/"  # the ASGI client's port: 80
    assert urls["terminal"] == f"http://manager/s/{sid}/terminal/"


async def test_entries_into_apps_that_open_nothing_are_purged(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent
) -> None:
    """Security review F11: every browser GET of ``/s/<session>/<app>/…`` adds an entry, and
    none was ever deleted."""
    live, ending = await running(admin), await running(admin)

    async def login() -> str:
        answer = await admin.post("/api/v1/auth/login", json={
            "username": "admin", "password": admin_password(app)})
        return str(answer.cookies["gpuslice_login"])

    async def code(sid: str, cookie: str) -> None:
        async with httpx.AsyncClient(base_url=url) as web:
            r = await web.get(f"/s/{sid}/echo/", headers={
                "Cookie": f"gpuslice_login={cookie}", "Accept": "text/html"})
            assert r.status_code == 303, r.text

    async def entries() -> list[tuple[str, str, bool]]:
        async with app.state.sessionmaker() as db:
            rows = (await db.execute(select(AppEntryRow))).scalars()
            return sorted((r.login_id, r.session_id, r.cookie_hash is not None) for r in rows)

    kept, revoked = await login(), await login()
    app_cookie = await enter(url, live, "echo", kept)  # a cookie in use: kept
    await code(live, kept)  # a code not used yet: kept
    async with app.state.sessionmaker() as db:
        [(kept_id,)] = (await db.execute(select(AppEntryRow.login_id).where(
            AppEntryRow.cookie_hash.is_not(None)))).all()
    wanted = await entries()
    await code(live, kept)  # a code expired unused
    async with app.state.sessionmaker() as db:
        await db.execute(update(AppEntryRow).where(
            AppEntryRow.cookie_hash.is_(None),
            AppEntryRow.created_at == select(func.max(AppEntryRow.created_at)).scalar_subquery()
        ).values(code_expires_at=utcnow() - timedelta(seconds=1)))
        await db.commit()
    await enter(url, live, "echo", revoked)  # a login that ends
    await enter(url, ending, "echo", kept)  # a session that ends
    logout = await admin.post("/api/v1/auth/logout", headers={
        "Authorization": f"Bearer {revoked}"})
    assert logout.status_code == 204
    assert (await admin.delete(f"/api/v1/sessions/{ending}")).status_code in (200, 202, 204)
    await wait_status(admin, ending, {"TERMINATED"})
    assert len(await entries()) == 5

    await run_once(app, "retention")
    assert await entries() == wanted and {login for login, _, _ in wanted} == {kept_id}
    async with httpx.AsyncClient(base_url=url) as web:  # what is kept still opens the app
        page = await web.get("/x", headers={"Host": at(url, live, "echo"),
                                            "Cookie": f"gpuslice_app={app_cookie}"})
        assert page.status_code == 200


async def test_a_session_not_running_has_no_apps_yet(
    url: str, admin: httpx.AsyncClient
) -> None:
    [queued] = await create(admin, image=IMAGE, resources={"cpu": 1})  # no node: PENDING
    async with httpx.AsyncClient(base_url=url, headers=admin.headers) as web:
        r = await web.get(f"/s/{queued['id']}/terminal/")
        assert r.status_code == 409 and r.json()["code"] == "not_running"
        r = await web.get("/", headers={"Host": at(url, queued["id"], "echo")})
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
            asking = asyncio.create_task(web.get("/small", headers=on(url, sid, "echo")))
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
            r = await web.get("/small", headers=on(url, sid, "echo"))
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
