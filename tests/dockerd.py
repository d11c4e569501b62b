"""The machine's Docker Engine for tests: is it there, the base image, an engine of their own.

Tests that need the engine skip, saying why, when no daemon answers; CI starts one. The base
image is built once per test session if it is missing (needs root + debootstrap). No test stops
or restarts the machine's dockerd (it would stop every container on the machine, the other
tests' included): tests that stop, restart or starve Docker use a Docker Engine of their own
(``private_dockerd``, opt-in with ``GPUSLICE_TEST_PRIVATE_DOCKERD=1``: it needs root and starts
a daemon). Import the fixtures
into a ``conftest.py`` to use them (``tests/agent`` and ``tests/platform`` do).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiodocker
import pytest

from gpuslice.imagebuild import DEFAULT_CACHE_DIR, BaseImageOptions, ensure_base_image
from tests.waits import scaled


def _docker_problem() -> str | None:
    async def ping() -> None:
        async with aiodocker.Docker() as docker:
            await asyncio.wait_for(docker.version(), scaled(10))

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


# ---------------------------------------------------------------- a Docker Engine of our own

PRIVATE_DOCKERD_ENV = "GPUSLICE_TEST_PRIVATE_DOCKERD"


def can_run_private_dockerd() -> str | None:
    """Why tests may not start a Docker Engine of their own here (``None``: they may)."""
    if os.environ.get(PRIVATE_DOCKERD_ENV) != "1":
        return f"set {PRIVATE_DOCKERD_ENV}=1 to let this test run a Docker Engine of its own"
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("unshare"):
        return "a Docker Engine of the test's own needs root, dockerd and unshare"
    return None


class PrivateDockerd:
    """A Docker Engine for tests that stop, restart or starve it: its own data root, exec root,
    pidfile and socket, and its own network namespace, so that nothing it does (it removes
    the default bridge, for one) reaches the machine's network or its dockerd, whose
    containers other tests on this machine use. Images come from the machine's engine."""

    def __init__(self, images: tuple[str, ...]) -> None:
        # Short: the socket's path is limited to 108 bytes, containerd's sockets live below.
        self.root = Path(tempfile.mkdtemp(prefix="gsd-", dir="/tmp"))
        self.socket = self.root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.images = images
        self.live_restore = True
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, live_restore: bool = True, timeout: float = 60.0) -> None:
        self.live_restore = live_restore
        argv = [
            "unshare", "--net", "dockerd", "--data-root", str(self.root / "data"),
            "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
            "--host", self.url, "--bridge", "none", "--iptables=false", "--ip-masq=false",
            *(["--live-restore"] if live_restore else []),
        ]
        with open(self.root / "dockerd.log", "ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        deadline = time.monotonic() + scaled(timeout)
        while self.docker("version", check=False).returncode != 0:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test's dockerd did not start: {self.log_tail()}")
            time.sleep(0.2)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, as systemd stops it; returns once it has exited."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)

    def load_images(self) -> None:
        for image in self.images:
            saved = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            subprocess.run(["docker", "-H", self.url, "load", "-q"], stdin=saved.stdout,
                           check=True, capture_output=True)
            if saved.wait() != 0:
                raise RuntimeError(f"docker save {image} failed")

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.url, *args], capture_output=True,
                              text=True, check=check, timeout=120)

    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.url}

    def remove(self) -> None:
        """Remove every container (live-restore would keep them past the daemon), stop, and
        delete the daemon's files."""
        if self._process is not None and self._process.poll() is None:
            listed = self.docker("ps", "-aq", check=False).stdout.split()
            if listed:
                self.docker("rm", "-f", *listed, check=False)
        self.stop()
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith(str(self.root))]
        for mount in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        text = (self.root / "dockerd.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def private_dockerd(base_image: str) -> Iterator[PrivateDockerd]:
    """A Docker Engine of the tests' own (see `PrivateDockerd`), with live-restore, holding
    the standard session image and its root filesystem image. A test that stops it starts it
    again before it ends (`running_private_dockerd`)."""
    why = can_run_private_dockerd()
    if why:
        pytest.skip(why)
    engine = PrivateDockerd((base_image, "gpuslice/rootfs:bookworm"))
    try:
        engine.start()
        engine.load_images()
        yield engine
    finally:
        engine.remove()


@pytest.fixture
def running_private_dockerd(private_dockerd: PrivateDockerd) -> Iterator[PrivateDockerd]:
    """The private engine, running with live-restore when the test begins and ends."""
    if not private_dockerd.running or not private_dockerd.live_restore:
        private_dockerd.stop()
        private_dockerd.start()
    try:
        yield private_dockerd
    finally:
        if not private_dockerd.running:
            private_dockerd.start()
