"""The manager as the proxy's tests serve it: a real uvicorn port (links and people's
WebSockets are real) and a fake agent that dials links back and plays the apps of ``APPS``;
the steps those tests take (a running session, its origin's ``Host``, a WebSocket upgrade).
Fixtures (``settings``, ``url``, ``agent``) reach a test module by being imported into it."""

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
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.manager.conftest import IMAGE, client_for, create
from tests.manager.fake_agent import FakeAgent
from tests.ports import free_port
from tests.waits import Deadline, scaled

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
    deadline = Deadline(30)
    while (r := await client.get(f"/api/v1/sessions/{session['id']}")).json()["status"] != (
            "RUNNING"):
        if deadline.passed:
            raise AssertionError(f"not RUNNING: {r.json()}")
        await asyncio.sleep(0.05)
    return str(session["id"])


async def token_of(client: httpx.AsyncClient) -> str:
    return str(client.headers["Authorization"].split()[1])


def sent(opened: dict[str, Any]) -> dict[str, str]:
    return dict(opened["headers"])


async def upgrade(url: str, headers: dict[str, str]) -> int:
    try:
        # *.localhost is this machine to browsers and curl, not to Python's resolver
        async with connect(url, additional_headers=headers, max_size=None, host="127.0.0.1"):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def at(url: str, sid: str, app: str) -> str:
    """The ``Host`` of an app's origin on the test server."""
    return f"{app}--{sid}.apps.localhost:{url.rsplit(':', 1)[1]}"


def on(url: str, sid: str, app: str, **headers: str) -> dict[str, str]:
    """Headers for a request to the app's origin (sent to 127.0.0.1, named by ``Host``)."""
    return {"Host": at(url, sid, app), **headers}


def admin_password(app: FastAPI) -> str:
    """The first admin's password, as the manager wrote it at its first start."""
    text = (app.state.settings.data_dir / "admin-credentials").read_text()
    return dict(line.split(": ", 1) for line in text.splitlines())["password"]
