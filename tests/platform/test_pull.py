"""Pull on demand with real processes and Docker: an image the registry lists but the node lacks
is pulled during PREPARING; here the registry serves no image content (none is reachable in CI),
so the session ends ERROR with Docker's reason."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.manager import fake_registry

from .conftest import (
    GPUSLICE,
    Platform,
    Process,
    _base_env,
    _remove_node_containers,
    _wait_http,
    free_port,
    start_agent,
)

pytestmark = pytest.mark.docker


registry_url = fake_registry.registry_url  # the fixture, under its name here


@pytest.fixture
def registry_platform(
    base_image: str, tmp_path: Path, registry_url: str
) -> Iterator[Platform]:
    """`gpuslice manager serve` with a registry configured, and `gpuslice agent serve`."""
    port, node = free_port(), f"node-{uuid.uuid4().hex[:8]}"
    env = _base_env(tmp_path)
    manager_env = env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                         "GPUSLICE_REGISTRY__URL": registry_url,
                         "GPUSLICE_NODES__HEARTBEAT_INTERVAL": "1"}
    manager = Process([GPUSLICE, "manager", "serve", "--port", str(port)], manager_env)
    plat = Platform(f"http://127.0.0.1:{port}", tmp_path / "data", node, env, [manager])
    try:
        _wait_http(plat.url, manager)
        plat.ok("login", plat.url, "--username", "admin", "--password-stdin",
                stdin=plat.admin_password() + "\n")
        token = plat.ok("admin", "token", "create", "--name", node, "--json")
        plat.env["AGENT_ENV_JSON"] = json.dumps(env | {
            "GPUSLICE_AGENT_MANAGER_URL": plat.url,
            "GPUSLICE_AGENT_JOIN_TOKEN": json.loads(token)["token"],
            "GPUSLICE_AGENT_NODE_NAME": node,
            "GPUSLICE_AGENT_DATA_DIR": str(tmp_path / "agent"),
            "GPUSLICE_AGENT_ACCELERATOR": "mock",
        })
        plat.processes.append(start_agent(plat))
        yield plat
    finally:
        for process in reversed(plat.processes):
            process.stop()
        _remove_node_containers(node)


def test_a_registry_image_the_node_cannot_pull_is_a_clear_error(
    registry_platform: Platform, registry_url: str
) -> None:
    plat = registry_platform
    assert "the registry has 2 image(s)" in plat.ok("image", "rescan")
    reference = f"{registry_url.removeprefix('http://')}/team/env:1"
    listed = {i["name"]: i for i in json.loads(plat.ok("image", "list", "--json"))}
    assert listed[reference]["sources"] == ["registry"]
    plat.ok("session", "create", "--name", "pulled", "--image", reference,
            "--cpu", "0.25", "--mem", "256m")
    session = plat.wait_status("pulled", {"ERROR", "RUNNING"}, timeout=60)
    assert session["status"] == "ERROR"
    assert session["status_reason"].startswith(f"could not pull {reference}: ")
