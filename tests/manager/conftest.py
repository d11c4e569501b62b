"""Manager fixtures: the app with its lifespan, clients logged in as admin or as new users."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from argon2 import PasswordHasher
from fastapi import FastAPI

from gpuslice.manager import security
from gpuslice.manager.app import bind, create_app
from gpuslice.manager.services.users import CREDENTIALS_FILE
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.conftest import FAILED
from tests.manager.fake_agent import FakeAgent

IMAGE = "python:3.11"
Client = httpx.AsyncClient


# argon2 at its cheapest (8 KiB, one pass): the manager's tests hash and check a few passwords
# each (the first admin, every user made, every login), ~0.1-0.3 s apiece with the production
# parameters on a busy 2-core machine, for nothing they test. The production hasher is what
# `gpuslice up` and the platform tests run; test_auth checks its parameters.
PRODUCTION_HASHER = security._HASHER
_CHEAP_HASHER = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture(autouse=True)
def _cheap_passwords(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(security, "_HASHER", _CHEAP_HASHER)


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data",
        database={"url": migrated_database_url},
        scheduler={"interval": 1.0},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        # Test machines are shared and busy: a password check at nice 19 would wait seconds
        # for a core. bench/login_flood.py measures the default.
        auth={"password_check_nice": 0},
    )


@pytest.fixture(scope="session")
def _routed_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """One app for the test process, its routes built once: FastAPI builds every route's
    dependencies and models anew for each app it makes, ~0.5 s of a core, most of what a
    manager test costs. Each test binds its own settings to it (``app``)."""
    return create_app(load_settings(data_dir=tmp_path_factory.mktemp("unbound")))


@pytest.fixture
async def app(_routed_app: FastAPI, settings: ManagerSettings, request: pytest.FixtureRequest
              ) -> AsyncIterator[FastAPI]:
    """The manager's app on this test's settings and database, its lifespan running: new
    state and middleware, as ``create_app`` gives them (``bind``). A test marked
    ``@pytest.mark.loops_off("scheduler", …)`` has those loops left off, and runs their
    passes itself (``loop_table.run_once``)."""
    marker = request.node.get_closest_marker("loops_off")
    bind(_routed_app, settings, loops_off=marker.args if marker else ())
    async with _routed_app.router.lifespan_context(_routed_app):
        yield _routed_app


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    """The app served over real HTTP (uvicorn, in this test's event loop), for clients that
    need a socket: event streams, the CLI in a subprocess."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


def client_for(app: FastAPI, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://manager", headers=headers
    )


@pytest.fixture
async def anon(app: FastAPI) -> AsyncIterator[Client]:
    async with client_for(app) as client:
        yield client


@pytest.fixture
async def admin(app: FastAPI, settings: ManagerSettings, anon: Client) -> AsyncIterator[Client]:
    lines = (settings.data_dir / CREDENTIALS_FILE).read_text().splitlines()
    creds = dict(line.split(": ", 1) for line in lines)
    token = await login(anon, creds["username"], creds["password"])
    async with client_for(app, token) as client:
        yield client


async def login(anon: Client, username: str, password: str) -> str:
    r = await anon.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, r.text
    return r.json()["access_token"]


UserFactory = Callable[..., Awaitable[Client]]


@pytest.fixture
async def make_user(app: FastAPI, admin: Client, anon: Client) -> AsyncIterator[UserFactory]:
    """Create a user (optionally with a policy) and return a client logged in as them."""
    clients: list[Client] = []
    counter = iter(range(1, 1000))

    async def make(
        username: str | None = None, *, role: str = "user", policy: dict[str, Any] | None = None
    ) -> Client:
        name = username or f"user{next(counter)}"
        body: dict[str, Any] = {"username": name, "password": "password-" + name, "role": role}
        if policy is not None:
            r = await admin.post("/api/v1/policies", json={"name": f"p-{name}", **policy})
            assert r.status_code == 201, r.text
            body["policy_id"] = r.json()["id"]
        r = await admin.post("/api/v1/users", json=body)
        assert r.status_code == 201, r.text
        client = client_for(app, await login(anon, name, "password-" + name))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


AgentFactory = Callable[..., Awaitable[FakeAgent]]


@pytest.fixture
async def make_agent(app: FastAPI, admin: Client) -> AsyncIterator[AgentFactory]:
    """Start an in-process fake agent: registers, heartbeats and follows its assignments."""
    agents: list[FakeAgent] = []

    async def make(name: str = "node-1", **kwargs: Any) -> FakeAgent:
        r = await admin.post("/api/v1/join-tokens", json={"name": f"join-{name}"})
        assert r.status_code == 201, r.text
        agent = FakeAgent(client_for(app), r.json()["token"], name, **kwargs)
        await agent.start()
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        await agent.stop()


async def create(client: Client, expect: int = 201, **body: Any) -> Any:
    body.setdefault("image", IMAGE)
    r = await client.post("/api/v1/sessions", json=body)
    assert r.status_code == expect, r.text
    return r.json()


BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("GPUSLICE_ARTIFACTS", Path(__file__).parents[1] / "artifacts"))


@pytest.fixture
async def browser(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Chromium, driven by Playwright (skipped where neither Debian build is installed); a
    test that fails leaves a screenshot of each page it had open (the path is printed)."""
    executable = next((b for b in BROWSERS if os.path.exists(b)), None)
    async_api = pytest.importorskip("playwright.async_api")
    if executable is None:
        pytest.skip("no Chromium (tools/host-setup.sh --browser installs it)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_api.async_playwright() as driver:
        chromium = await driver.chromium.launch(executable_path=executable,
                                                args=["--no-sandbox"])
        yield chromium
        if request.node.stash.get(FAILED, False):
            for number, page in enumerate(p for c in chromium.contexts for p in c.pages):
                path = ARTIFACTS / f"failed-{request.node.name}-{number}.png"[:200]
                try:
                    await page.screenshot(path=str(path))
                    print(f"the browser's page {page.url} when it failed: {path}")
                except Exception as err:  # a page that is closing: say so, keep the report
                    print(f"the browser's page {page.url}: no screenshot ({err})")
        await chromium.close()
