"""`gpuslice up` and `gpuslice agent serve` tell systemd READY=1 (``Type=notify`` units) only
once they are of use: `up` when its console answers and its node has joined, an agent when
its node shows ALIVE. The test plays systemd's side of ``$NOTIFY_SOCKET`` (this machine runs
no systemd), and checks the world at the very moment the message arrives."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.notify_socket import NotifySocket
from tests.waits import scaled

from .conftest import GPUSLICE, Platform, Process, new_platform, remove_node_containers

pytestmark = pytest.mark.docker


def test_up_is_ready_once_its_console_answers_and_its_node_joined(
    base_image: str, tmp_path: Path, platforms: list[Platform]
) -> None:
    receiver = NotifySocket()
    plat = new_platform(tmp_path, receiver.env)
    platforms.append(plat)
    up = Process(plat.up_argv(), plat.env)
    plat.processes.append(up)
    seen: dict[str, Any] = {}

    def at_ready(fields: list[str]) -> None:
        if "READY=1" in fields:
            console = httpx.get(f"{plat.url}/", timeout=10, follow_redirects=True)
            seen["console"] = (console.status_code, console.headers["content-type"])
            seen["nodes"] = _nodes(plat)

    try:
        fields = receiver.wait_for("READY=1", lambda: up.popen.poll() is None, timeout=300,
                                   on_message=at_ready)
        assert seen["console"][0] == 200 and seen["console"][1].startswith("text/html")
        assert seen["nodes"] == [(plat.node, "ALIVE")]
        assert f"STATUS=up at {plat.url} (node {plat.node} joined)" in fields
        up.popen.send_signal(signal.SIGTERM)
        receiver.wait_for("STOPPING=1", timeout=30)
        assert up.popen.wait(scaled(60)) == 0
    finally:
        receiver.close()


def test_agent_serve_is_ready_once_its_node_is_alive(split_platform: Platform,
                                                     tmp_path: Path) -> None:
    plat = split_platform
    node = f"node-{uuid.uuid4().hex[:8]}"  # a node the manager has never seen
    token = json.loads(plat.ok("admin", "token", "create", "--name", node, "--json"))["token"]
    receiver = NotifySocket()
    env = json.loads(plat.env["AGENT_ENV_JSON"]) | receiver.env | {
        "GPUSLICE_AGENT_NODE_NAME": node, "GPUSLICE_AGENT_JOIN_TOKEN": token,
        "GPUSLICE_AGENT_DATA_DIR": str(tmp_path / "agent-2"),
    }
    agent = Process([GPUSLICE, "agent", "serve"], env)
    plat.processes.append(agent)
    at_ready: list[tuple[str, str]] = []
    try:
        assert node not in dict(_nodes(plat))
        fields = receiver.wait_for(
            "READY=1", lambda: agent.popen.poll() is None, timeout=120,
            on_message=lambda f: at_ready.extend(_nodes(plat)) if "READY=1" in f else None)
        assert dict(at_ready)[node] == "ALIVE"
        assert f"STATUS=node {node} joined {plat.url}" in fields
    finally:
        agent.stop(signal.SIGTERM)
        receiver.close()
        remove_node_containers(node, plat.env)


def _nodes(plat: Platform) -> list[tuple[str, str]]:
    return [(n["name"], n["status"]) for n in json.loads(plat.ok("node", "list", "--json"))]
