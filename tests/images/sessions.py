"""Sessions of built images through the agent's runtime (the real container spec, the real
Docker Engine, a mock GPU slice), for the image tests; skipped, saying how to build an image,
when it is not on this machine."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiodocker
import pytest

from gpuslice.agent.runtime import DockerRuntime, build_container_spec
from gpuslice.agent.runtime.spec import ContainerSpec, SessionSpec, SpecOptions
from gpuslice.common.resources import GiB
from tests.agent.conftest import remove_node
from tests.agent.factories import gpu_slice

#: One fGPU of a mock 8 GiB GPU at 2 fGPU per GPU, as the guide's sessions ask.
FGPU_PER_GPU = 2000
ONE_FGPU = gpu_slice("GPU-mock-0000", 0, 1000, 4 * GiB, 54, capacity=FGPU_PER_GPU)

MakeSession = Callable[..., ContainerSpec]


async def missing_images(tags: list[str]) -> list[str]:
    async with aiodocker.Docker() as docker:
        missing = []
        for tag in tags:
            try:
                await docker.images.inspect(tag)
            except aiodocker.DockerError:
                missing.append(tag)
        return missing


async def require_image(tag: str, how: str) -> str:
    if await missing_images([tag]):
        pytest.skip(f"{tag} is not built; {how}")
    return tag


@pytest.fixture
async def node_runtime(docker_ready: None, tmp_path: Path) -> AsyncIterator[DockerRuntime]:
    """A runtime for a node of this test's own; its containers are removed after."""
    node = f"test-{uuid.uuid4().hex[:10]}"
    async with DockerRuntime(node_name=node, files_root=tmp_path / "node") as rt:
        try:
            yield rt
        finally:
            await remove_node(rt)


def session_spec(runtime: DockerRuntime, image: str, *, allow_sudo: bool = False,
                 gpu: bool = True, cpu: int = 1000, mem: int = 2 * GiB) -> ContainerSpec:
    """The container a node makes for an interactive session of ``image`` (1 fGPU by
    default), with the node's ``allow_sudo``."""
    session = SessionSpec(
        session_id=f"t{uuid.uuid4().hex[:12]}", owner="alice", image=image,
        type="interactive", cpu=cpu, mem=mem,
        slices=(ONE_FGPU,) if gpu else (), device_capacity=FGPU_PER_GPU,
    )
    options = SpecOptions(node_name=runtime.node_name, accelerator="mock",
                          allow_sudo=allow_sudo)
    return build_container_spec(session, options)


async def image_labels(tag: str) -> dict[str, str]:
    async with aiodocker.Docker() as docker:
        info = await docker.images.inspect(tag)
    return dict((info.get("Config") or {}).get("Labels") or {})
