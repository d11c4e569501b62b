"""The machine's Docker Engine for tests: is it there, the base image, restarting dockerd.

Tests that need the engine skip, saying why, when no daemon answers; CI starts one. The base
image is built once per test session if it is missing (needs root + debootstrap). Restarting
dockerd is opt-in (``GPUSLICE_TEST_RESTART_DOCKERD=1``): it stops every container on the
machine, which CI can afford and a developer's laptop usually cannot. Import the fixtures into
a ``conftest.py`` to use them (``tests/agent`` and ``tests/platform`` do).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import aiodocker
import pytest

from gpuslice.images import DEFAULT_CACHE_DIR, BaseImageOptions, ensure_base_image

DOCKERD_PIDFILE = Path("/var/run/docker.pid")


def _docker_problem() -> str | None:
    async def ping() -> None:
        async with aiodocker.Docker() as docker:
            await asyncio.wait_for(docker.version(), 10)

    try:
        asyncio.run(ping())
    except Exception as exc:  # no socket, permission denied, daemon not answering
        return f"no Docker daemon reachable ({exc}); start dockerd to run this test"
    return None


@pytest.fixture(scope="session")
def docker_ready() -> None:
    problem = _docker_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def base_image(docker_ready: None) -> str:
    """The gpuslice base image tag, built (once, with progress on stdout) if missing."""
    cache = Path(os.environ.get("GPUSLICE_IMAGE_CACHE", DEFAULT_CACHE_DIR))
    extra_ca = os.environ.get("GPUSLICE_EXTRA_CA_BUNDLE")
    options = BaseImageOptions(
        cache_dir=cache, extra_ca_bundle=Path(extra_ca) if extra_ca else None
    )

    async def image_present() -> bool:
        async with aiodocker.Docker() as docker:
            try:
                await docker.images.inspect(options.tag)
            except aiodocker.DockerError:
                return False
            return True

    if asyncio.run(image_present()):
        return options.tag  # built by scripts/build-images.sh (CI) or an earlier run
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip(f"{options.tag} is missing and cannot be built here (needs root, debootstrap)")

    async def build() -> str:
        async with aiodocker.Docker() as docker:
            return (await ensure_base_image(docker, options, progress=print)).tag

    return asyncio.run(build())


def restart_dockerd(timeout: float = 90.0) -> None:
    """Stop this machine's dockerd (SIGTERM) and start it again with the same command line."""
    pid = int(DOCKERD_PIDFILE.read_text().strip())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"dockerd (pid {pid}) did not stop within {timeout:.0f}s")
        time.sleep(0.2)
    with open("/tmp/gpuslice-test-dockerd.log", "ab") as log:
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def remove_fence(node: str) -> None:
    """Remove a node's session network and its iptables chains (``agent/isolation``), which an
    agent stopped while its sessions ran leaves in place; its containers must be gone first."""
    from gpuslice.agent.isolation.policy import Fence

    fence = Fence(node)
    for parent, chain in (("INPUT", fence.input_chain), ("DOCKER-USER", fence.forward_chain),
                          ("FORWARD", fence.forward_chain)):
        rule = ["-i", fence.bridge, "-j", chain]
        while subprocess.run(["iptables", "-w", "-D", parent, *rule],
                             capture_output=True, check=False).returncode == 0:
            pass
    for chain in (fence.input_chain, fence.forward_chain):
        subprocess.run(["iptables", "-w", "-F", chain], capture_output=True, check=False)
        subprocess.run(["iptables", "-w", "-X", chain], capture_output=True, check=False)
    subprocess.run(["docker", "network", "rm", fence.network], capture_output=True, check=False)


def can_restart_dockerd() -> str | None:
    if os.environ.get("GPUSLICE_TEST_RESTART_DOCKERD") != "1":
        return "set GPUSLICE_TEST_RESTART_DOCKERD=1 to let this test stop and restart dockerd"
    if os.geteuid() != 0 or not DOCKERD_PIDFILE.is_file():
        return f"restarting dockerd needs root and {DOCKERD_PIDFILE}"
    return None
