"""One port per app (``apps.port_range``): against a real server (uvicorn on a port, the app
ports the manager's own listeners) and the fake agent, which plays the apps.

The range is four ports, the first held by another program (as a second ``gpuslice up``
would): the apps get the other three, in order, and a fourth app finds the range exhausted.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from gpuslice.manager.db.models import AppPortRow
from gpuslice.manager.proxy import ports
from gpuslice.manager.proxy.ports import AppPorts
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.browser import CALL_API_WITH_COOKIES, post_login_async
from tests.manager.conftest import ARTIFACTS, IMAGE, UserFactory
from tests.manager.fake_agent import FakeAgent
from tests.manager.proxy_helpers import (
    admin_password,
    agent,
    running,
    sent,
    token_of,
    upgrade,
)
from tests.ports import free_port, free_span
from tests.waits import await_for, scaled

__all__ = ["agent"]  # the fixture, for this module's tests (on its own `url`)
SPAN = 4


@pytest.fixture
def first_port() -> int:
    return free_span(SPAN)


@pytest.fixture
def held(first_port: int) -> Iterator[socket.socket]:
    """The range's first port, taken by another program."""
    other = socket.socket()
    other.bind(("127.0.0.1", first_port))
    other.listen()
    yield other
    other.close()


@pytest.fixture
def settings(tmp_path: Path, database_url: str, first_port: int) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": database_url},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        apps={"dial_back_timeout": 5, "port_range": f"{first_port}-{first_port + SPAN - 1}",
              "console_url": "http://localhost:8080"},
        auth={"password_check_nice": 0},  # the login form's check: not behind the others' load
    )


@pytest.fixture
async def url(app: FastAPI, held: socket.socket) -> AsyncIterator[str]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning"))
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(scaled(30)):
        while not server.started:
            await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving


def _port(app_url: str) -> int:
    return int(httpx.URL(app_url).port or 0)


async def _refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    return False


async def test_each_app_gets_a_free_port_of_the_range_until_none_is_left(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, first_port: int
) -> None:
    sid = await running(admin)
    listed = (await admin.get(f"/api/v1/sessions/{sid}/apps")).json()["apps"]
    urls = {a["name"]: a["url"] for a in listed}
    # the first port is another program's: skipped; the terminal stays the manager's page
    assert urls["echo"] == f"http://localhost:{first_port + 1}/"
    assert urls["notebook"] == f"http://localhost:{first_port + 2}/"
    assert urls["terminal"] == f"http://manager/s/{sid}/terminal/"
    again = (await admin.get(f"/api/v1/sessions/{sid}/apps")).json()["apps"]
    assert {a["name"]: a["url"] for a in again} == urls  # the same ports: allocated once
    bearer = {"Authorization": f"Bearer {await token_of(admin)}"}
    async with httpx.AsyncClient(base_url=url, headers=bearer) as web:
        moved = await web.get(f"/s/{sid}/8123/a?b=1")  # any port of the session is an app
        assert moved.status_code == 307
        assert moved.headers["location"] == f"http://localhost:{first_port + 3}/a?b=1"
        full = await web.get(f"/s/{sid}/8124/")
        assert full.status_code == 503 and full.json()["code"] == "no_app_port"
        assert "apps.port_range" in full.json()["message"]
    echo = first_port + 1
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{echo}", headers=bearer) as web:
        r = await web.get("/headers?x=1", headers={
            "Cookie": f"theirs=1; gpuslice_login=a; gpuslice_app=b; gpuslice_app_{echo}=c"})
        assert r.status_code == 200 and r.json()["target"] == "/headers?x=1"
        assert sent(agent.opened[-1])["Cookie"] == "theirs=1"  # none of ours reach the app
        assert agent.opened[-1]["app"]["name"] == "echo"
        assert (await web.get("/api/v1/sessions")).json()["target"] == "/api/v1/sessions"
    headers = {**bearer, "Host": f"localhost:{echo}"}
    assert await upgrade(f"ws://127.0.0.1:{echo}/ws", headers) == 101

    # a restart listens on the same ports again
    await app.state.app_ports.close()
    assert await _refused(echo)
    app.state.app_ports = AppPorts(app, app.state.settings, app.state.sessionmaker)
    await app.state.app_ports.restore()
    async with httpx.AsyncClient(headers=bearer) as web:
        assert (await web.get(f"http://127.0.0.1:{echo}/")).status_code == 200

    # the session ends: its ports close, their rows go
    await admin.delete(f"/api/v1/sessions/{sid}")
    await app.state.app_ports.sweep()  # the manager's loop does it every few seconds
    await await_for(lambda: _refused(echo), scaled(10), "the app's port closed")
    async with app.state.sessionmaker() as db:
        assert (await db.execute(select(AppPortRow))).all() == []


async def _enter(url: str, sid: str, app_name: str, login: str) -> tuple[int, str]:
    """A browser's way into an app's port: its port, and the cookie it got there."""
    async with httpx.AsyncClient(base_url=url) as web:
        r = await web.get(f"/s/{sid}/{app_name}/lab?x=1", headers={
            "Cookie": f"gpuslice_login={login}", "Accept": "text/html"})
        assert r.status_code == 303, r.text
        location = httpx.URL(r.headers["location"])
        assert (location.host, location.path) == ("localhost", "/_gpuslice/enter")
        port = int(location.port or 0)
        entered = await web.get(f"http://127.0.0.1:{port}/_gpuslice/enter?"
                                f"{location.query.decode()}",
                                headers={"Host": f"localhost:{port}"})
        assert entered.status_code == 303 and entered.headers["location"] == "/lab?x=1"
        set_cookie = entered.headers["set-cookie"]
        assert set_cookie.startswith(f"gpuslice_app_{port}=") and "HttpOnly" in set_cookie
        assert "Domain" not in set_cookie
        return port, str(entered.cookies[f"gpuslice_app_{port}"])


async def test_each_app_port_takes_its_own_cookie_only(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent,
    make_user: UserFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "PER_SESSION", 2)
    sid = await running(admin)
    # no port for those the app is not open to
    async with httpx.AsyncClient(base_url=url) as web:
        assert (await web.get(f"/s/{sid}/echo/")).status_code == 401
    assert await upgrade(f"{url.replace('http', 'ws')}/s/{sid}/echo/", {}) == 404
    async with app.state.sessionmaker() as db:
        assert (await db.execute(select(AppPortRow))).all() == []
    login = (await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": admin_password(app)})).cookies["gpuslice_login"]
    echo, echo_cookie = await _enter(url, sid, "echo", login)
    nb, nb_cookie = await _enter(url, sid, "notebook", login)
    assert echo != nb
    # one session cannot take the whole range (any port number is an app)
    async with httpx.AsyncClient(base_url=url, headers=admin.headers) as web:
        capped = await web.get(f"/s/{sid}/8123/")
        assert capped.status_code == 503 and capped.json()["code"] == "no_app_port"
        assert "this session has 2 app ports already" in capped.json()["message"]
    # a browser sends a host's cookies to all its ports: each port takes its own only
    both = f"gpuslice_app_{echo}={echo_cookie}; gpuslice_app_{nb}={nb_cookie}"
    async with httpx.AsyncClient() as web:
        page = await web.get(f"http://127.0.0.1:{echo}/headers", headers={"Cookie": both})
        assert page.status_code == 200 and page.json()["target"] == "/headers"
        assert "Cookie" not in sent(agent.opened[-1])
        # echo's cookie value under notebook's name (or its own) does not open notebook
        for cookie in (f"gpuslice_app_{nb}={echo_cookie}", f"gpuslice_app_{echo}={echo_cookie}",
                       f"gpuslice_app={echo_cookie}"):
            r = await web.get(f"http://127.0.0.1:{nb}/x", headers={"Cookie": cookie})
            assert r.status_code == 401, cookie
        # the manager's login cookie is no key to an app port; a browser is sent to log in
        r = await web.get(f"http://127.0.0.1:{echo}/x", headers={"Cookie": f"gpuslice_login="
                                                                           f"{login}"})
        assert r.status_code == 401
        bounced = await web.get(f"http://127.0.0.1:{echo}/lab?x=1", headers={
            "Cookie": f"gpuslice_login={login}", "Accept": "text/html"})
        assert bounced.headers["location"] == f"http://localhost:8080/s/{sid}/echo/lab?x=1"
        # an app's cookie is no key to the API
        r = await web.get(f"{url}/api/v1/sessions", headers={"Cookie": both})
        assert r.status_code == 401
        # a write with the cookie must come from the app's own port
        foreign = {"Cookie": both, "Origin": f"http://localhost:{nb}"}
        assert (await web.post(f"http://127.0.0.1:{echo}/x", headers={
            **foreign, "Host": f"localhost:{echo}"})).status_code == 403
        same = {**foreign, "Origin": f"http://localhost:{echo}", "Host": f"localhost:{echo}"}
        assert (await web.post(f"http://127.0.0.1:{echo}/x", headers=same)).status_code == 200
        # another user's bearer token: not found; no credentials: 401
        bob = {"Authorization": f"Bearer {await token_of(await make_user('bob'))}"}
        assert (await web.get(f"http://127.0.0.1:{echo}/x", headers=bob)).status_code == 404
        assert (await web.get(f"http://127.0.0.1:{echo}/x")).status_code == 401
        # a code minted for one app is refused on another's port
        r = await web.get(f"{url}/s/{sid}/echo/", headers={
            "Cookie": f"gpuslice_login={login}", "Accept": "text/html"})
        query = httpx.URL(r.headers["location"]).query.decode()
        wrong = await web.get(f"http://127.0.0.1:{nb}/_gpuslice/enter?{query}")
        assert wrong.status_code == 422 and wrong.json()["code"] == "enter_code_invalid"


async def test_chromium_opens_each_app_at_its_own_port_with_its_own_cookie(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, browser: Any,
    first_port: int
) -> None:
    sid = await running(admin)
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    page = await browser.new_page()
    # the login page first (its form may only lead to the manager's origin: CSP form-action)
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "admin", admin_password(app))
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await page.goto(f"{manager}/s/{sid}/echo/headers")  # where the console's launcher links
    echo, nb = first_port + 1, first_port + 2
    try:
        await page.wait_for_url(f"http://localhost:{echo}/headers", timeout=scaled(60) * 1000)
    except Exception:  # where it stopped, and what it showed
        raise AssertionError(f"at {page.url}: {(await page.inner_text('body'))[:500]}") from None
    assert '"target":"/headers"' in (await page.inner_text("body")).replace(" ", "")
    await page.screenshot(path=str(ARTIFACTS / "ports-echo.png"))
    await page.goto(f"{manager}/s/{sid}/notebook/tree")
    await page.wait_for_url(f"http://localhost:{nb}/tree", timeout=scaled(30) * 1000)
    # the browser sent the login and both apps' cookies to notebook's port: none reached it
    assert "Cookie" not in sent(agent.opened[-1]) and agent.opened[-1]["app"]["name"] == \
        "notebook"
    cookies = {c["name"]: c for c in await page.context.cookies()}
    assert set(cookies) == {"gpuslice_login", f"gpuslice_app_{echo}", f"gpuslice_app_{nb}"}
    assert all(c["httpOnly"] and c["domain"] == "localhost" for c in cookies.values())
    reached = await page.evaluate(CALL_API_WITH_COOKIES, f"{manager}/api/v1/sessions")
    assert reached.startswith("refused") and sid not in reached, reached


async def test_a_restart_on_a_narrower_range_listens_on_no_port_outside_it(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, first_port: int,
    settings: ManagerSettings,
) -> None:
    """An admin narrows apps.port_range (to give ports back to other programs) and restarts:
    the manager no longer listens outside the range; the app gets a port of the range."""
    sid = await running(admin)
    listed = (await admin.get(f"/api/v1/sessions/{sid}/apps")).json()["apps"]
    echo = first_port + 1
    assert {a["name"]: a["url"] for a in listed}["echo"] == f"http://localhost:{echo}/"
    await app.state.app_ports.close()
    narrower = settings.model_copy(update={"apps": settings.apps.model_copy(update={
        "port_range": f"{first_port + 2}-{first_port + SPAN - 1}"})})
    app.state.app_ports = AppPorts(app, narrower, app.state.sessionmaker)
    await app.state.app_ports.restore()
    assert await _refused(echo)
    listed = (await admin.get(f"/api/v1/sessions/{sid}/apps")).json()["apps"]
    urls = {a["name"]: a["url"] for a in listed}
    assert urls["notebook"] == f"http://localhost:{first_port + 2}/"  # in the range: kept
    assert urls["echo"] == f"http://localhost:{first_port + 3}/"


async def test_an_app_port_names_its_session_to_no_one_the_app_is_not_open_to(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, first_port: int,
    make_user: UserFactory,
) -> None:
    """A browser on an app's port without its cookie is sent to the console's way into the
    app, which names the session: only if its login opens the app. Anyone else (no login,
    another user's login or token) gets an answer naming nothing: a port of the range is not
    a way to learn others' sessions and apps."""
    sid = await running(admin)
    await admin.get(f"/api/v1/sessions/{sid}/apps")  # its apps get their ports
    echo = first_port + 1
    html = {"Accept": "text/html"}
    bob = await token_of(await make_user("bob"))
    login = (await admin.post("/api/v1/auth/login", json={
        "username": "admin", "password": admin_password(app)})).cookies["gpuslice_login"]
    async with httpx.AsyncClient() as web:
        for cookie in ("", f"gpuslice_login={bob}", f"gpuslice_login={login}x"):
            r = await web.get(f"http://127.0.0.1:{echo}/lab", headers={**html, "Cookie": cookie})
            assert r.status_code == 401, (cookie, r.headers)
            assert sid not in r.text and "echo" not in r.text, r.text
        r = await web.get(f"http://127.0.0.1:{echo}/lab", headers={
            **html, "Cookie": f"gpuslice_login={login}"})
        assert r.status_code == 303
        assert r.headers["location"] == f"http://localhost:8080/s/{sid}/echo/lab"
        # another user's token: not found, and not told which session is there
        r = await web.get(f"http://127.0.0.1:{echo}/lab", headers={
            "Authorization": f"Bearer {bob}"})
        assert r.status_code == 404 and sid not in r.text, r.text
        assert r.json()["message"] == f"no app of yours is served on port {echo}"


async def test_a_full_range_leaves_the_app_list_whole(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, first_port: int,
) -> None:
    """The list of a session's apps gives each a port while the range has one; once none is
    left (taken by other sessions, or by this one's own listening processes: each is an
    app), the rest keep the manager's way in, which says so when opened, and the list (with
    the terminal) still loads: not a 503 for the whole of it."""
    served = [{"port": p, "process": "worker"} for p in (9001, 9002, 9003)]
    agent.apps_answer = lambda request: {
        "apps": [{"name": a["name"], "state": "ready"} for a in request["ask"]["apps"]],
        "ports": served}
    sid = await running(admin)
    r = await admin.get(f"/api/v1/sessions/{sid}/apps")
    assert r.status_code == 200, r.text
    urls = {a["name"]: a["url"] for a in r.json()["apps"]}
    assert urls["terminal"] == f"http://manager/s/{sid}/terminal/"
    assert urls["echo"] == f"http://localhost:{first_port + 1}/"
    assert urls["notebook"] == f"http://localhost:{first_port + 2}/"
    assert urls["9001"] == f"http://localhost:{first_port + 3}/"
    assert urls["9002"] == f"http://manager/s/{sid}/9002/"  # no port left for it
    bearer = {"Authorization": f"Bearer {await token_of(admin)}"}
    async with httpx.AsyncClient(base_url=url, headers=bearer) as web:
        full = await web.get(f"/s/{sid}/9002/")
        assert full.status_code == 503 and full.json()["code"] == "no_app_port"


async def test_a_reused_port_starts_with_nothing_the_app_before_left(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, browser: Any,
    first_port: int
) -> None:
    """Security review F12: ports are reused, and a browser keeps an origin's storage and
    service workers across apps: the next session's app on the port (another user's, with
    ``apps.admin_access``) found what the one before left. The way in clears them (the
    origin's own: "cookies" would be the whole host's), once per app a browser enters."""
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    echo = f"http://localhost:{first_port + 1}"
    page = await browser.new_page()
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "admin", admin_password(app))
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)

    async def open_echo(sid: str) -> Any:
        async with page.expect_response(lambda r: "/_gpuslice/enter" in r.url) as entered:
            await page.goto(f"{manager}/s/{sid}/echo/headers")
        await page.wait_for_url(f"{echo}/headers", timeout=scaled(60) * 1000)
        return await entered.value

    before = await running(admin)
    first = await open_echo(before)
    assert await first.header_value("clear-site-data") == '"cache", "storage"'
    await page.evaluate("localStorage.setItem('left', 'by the app before')")
    again = await open_echo(before)  # the same app again: what it keeps stays
    assert await again.header_value("clear-site-data") is None
    assert await page.evaluate("localStorage.getItem('left')") == "by the app before"

    await admin.delete(f"/api/v1/sessions/{before}")
    await app.state.app_ports.sweep()  # the manager's loop does it every few seconds
    after = await running(admin)
    await open_echo(after)
    assert agent.opened[-1]["app"]["name"] == "echo"
    assert await page.evaluate("localStorage.getItem('left')") is None

