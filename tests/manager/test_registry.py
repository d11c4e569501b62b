"""Registry rescan (HTTP API v2, against a small real HTTP server here) and pull on demand."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gpuslice.manager.services.images import registry
from gpuslice.manager.settings import ManagerSettings, RegistrySettings, load_settings
from tests.manager import fake_registry
from tests.manager.conftest import IMAGE, AgentFactory, Client, create
from tests.manager.fake_registry import DIGEST, ROUTES
from tests.manager.helpers import wait_status
from tests.waits import scaled

registry_url = fake_registry.registry_url  # the fixture, under its name here


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str, registry_url: str) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": migrated_database_url},
        scheduler={"interval": 1.0},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.5},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        registry={"url": registry_url},
    )


async def test_client_reads_catalog_pages_tags_and_labels(registry_url: str) -> None:
    found = await registry.list_images(RegistrySettings(url=registry_url))
    host = registry_url.removeprefix("http://")
    torch, env = found
    assert torch.reference == f"{host}/team/torch:2.3" and torch.image_id == DIGEST
    assert torch.size == 3000 and torch.labels["gpuslice.image.title"] == "Torch 2.3"
    assert (env.reference, env.image_id, env.labels) == (f"{host}/team/env:1", None, {})


async def test_unreachable_registry_is_a_clear_error(admin: Client, settings: Any) -> None:
    settings.registry.url = "http://127.0.0.1:9"
    r = await admin.post("/api/v1/images/rescan")
    assert r.status_code == 409 and r.json()["code"] == "registry_unreachable"
    assert "127.0.0.1:9" in r.json()["message"]


async def test_rescanned_images_are_usable_and_pulled_on_demand(
    admin: Client, make_agent: AgentFactory, registry_url: str
) -> None:
    agent = await make_agent(auto_run=False)
    r = await admin.post("/api/v1/images/rescan")
    assert r.status_code == 200 and r.json() == {"nodes": 1, "registry": 2}
    torch = f"{registry_url.removeprefix('http://')}/team/torch:2.3"
    image = {i["name"]: i for i in (await admin.get("/api/v1/images")).json()}[torch]
    assert image["sources"] == ["registry"] and image["title"] == "Torch 2.3"
    assert image["size"] == 3000 and image["nodes"] == []
    refused = await create(admin, expect=422, image=torch, resources={"mem": "1g"})
    assert refused["code"] == "below_image_minimum"

    [s] = await create(admin, image=torch, resources={"mem": "2g"})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    # The placement reaches the agent by its long-poll's answer, which may come just after
    # the status reads SCHEDULED (failed once on PostgreSQL when looked at straight away).
    deadline = time.monotonic() + scaled(5)
    while not agent.seen[-1]["sessions"] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert [a["pull"] for a in agent.seen[-1]["sessions"]] == [True]
    await agent.report(s["id"], "PREPARING")
    await agent.report(s["id"], "PREPARING", reason=f"pulling {torch}: 45%")
    shown = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert shown["status"] == "PREPARING" and shown["status_reason"] == f"pulling {torch}: 45%"
    assert [h["status"] for h in shown["history"]] == ["PENDING", "SCHEDULED", "PREPARING"]
    await agent.report(s["id"], "RUNNING")

    agent.images = [*agent.images, torch]  # pulled: the node reports it, nothing more to pull
    await agent.heartbeat()
    r = await agent.client.get("/api/v1/agents/me/assignments")
    assert [a["pull"] for a in r.json()["sessions"]] == [False]


async def test_an_image_gone_from_the_registry_is_no_longer_offered(
    admin: Client, registry_url: str
) -> None:
    assert (await admin.post("/api/v1/images/rescan")).status_code == 200
    env = f"{registry_url.removeprefix('http://')}/team/env:1"
    await create(admin, image=env)
    saved = ROUTES.pop("/v2/team/env/tags/list")
    try:
        assert (await admin.post("/api/v1/images/rescan")).json()["registry"] == 1
    finally:
        ROUTES["/v2/team/env/tags/list"] = saved
    assert (await create(admin, expect=404, image=env))["code"] == "unknown_image"
