"""Fixtures for the agent's tests against the real Docker Engine (see ``tests/dockerd.py``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gpuslice.agent.isolation.policy import Fence
from gpuslice.agent.runtime import DockerRuntime, build_container_spec
from gpuslice.agent.runtime.spec import ContainerSpec, SessionSpec, SpecOptions
from tests.dockerd import base_image, docker_ready

__all__ = ["base_image", "docker_ready"]


@pytest.fixture
async def runtime(base_image: str, tmp_path: Path) -> AsyncIterator[DockerRuntime]:
    """A runtime for a node of its own: its containers (and session network) are this test's
    only, removed after."""
    node = f"test-{uuid.uuid4().hex[:10]}"
    async with DockerRuntime(node_name=node, files_root=tmp_path / "node") as rt:
        try:
            yield rt
        finally:
            await remove_node(rt)


async def remove_node(runtime: DockerRuntime) -> None:
    """A test node's session containers, network sandboxes and session network (when a test
    made its fence), in that order."""
    for state in await runtime.list_managed():
        await runtime.remove_container(state.container_id)
    network = Fence(runtime.node_name).network
    for sandbox in await runtime.list_sandboxes(network):
        await runtime.remove_sandbox(sandbox.id)
    await runtime.remove_network(network)


@pytest.fixture
def make_spec(runtime: DockerRuntime, base_image: str) -> Callable[..., ContainerSpec]:
    """``make_spec(type=..., command=..., ...)`` → a ContainerSpec for this test's node."""

    def make(**changes: object) -> ContainerSpec:
        values: dict[str, object] = {
            "session_id": f"t{uuid.uuid4().hex[:12]}",
            "owner": "alice",
            "image": base_image,
            "type": "interactive",
            "cpu": 500,
            "mem": 256 * 1024**2,
        }
        values.update(changes)
        options = SpecOptions(node_name=runtime.node_name, accelerator="mock")
        return build_container_spec(SessionSpec(**values), options)  # type: ignore[arg-type]

    return make
