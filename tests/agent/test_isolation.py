"""Session network isolation with real containers, a real fence and a real "outside" (issue 16,
finding 8): a session cannot reach another session, the host (gateway, its own addresses), the
manager or link-local addresses; outside networks stay reachable unless egress is off; the host
still reaches a session's apps.

The outside world is a network namespace of this test's own behind a veth pair, in
198.18.0.0/15 (reserved for tests), with a "manager", a "package registry" and a link-local
"metadata" address. Everything is named uniquely and removed afterwards: containers, the Docker
network, the fence's chains, the namespace, the veth pair and the route.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from gpuslice.agent.isolation.network import SessionNetwork, ipv6_available
from gpuslice.agent.isolation.policy import Fence
from gpuslice.agent.isolation.sandboxes import Sandboxes
from gpuslice.agent.runtime import ContainerState, DockerRuntime
from gpuslice.agent.runtime.spec import NO_IPV6, ContainerSpec, SessionSpec, SpecOptions
from gpuslice.agent.runtime.spec import build_container_spec as build
from gpuslice.agent.settings import NetworkSettings
from tests.waits import scaled

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None
                       or shutil.which("ip") is None,
                       reason="needs root, iptables and iproute2 (the fence and the outside)"),
]

PORT = 8080
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("open")
except OSError as err:
    print(f"closed: {err}")
"""
LISTEN = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(64)
print("listening", flush=True)
while True:
    server.accept()[0].close()
"""


@dataclass(frozen=True)
class Outside:
    """Addresses in the outside namespace, each with a listener on ``PORT``."""

    manager: str
    registry: str
    metadata: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def outside() -> Iterator[Outside]:
    tag = uuid.uuid4().hex[:6]
    ns, host_end, far_end = f"gs-test-{tag}", f"gsv{tag}a", f"gsv{tag}b"
    base = f"198.18.{random.randrange(256)}.{random.randrange(0, 256, 8)}"
    prefix = base.rsplit(".", 1)[0]
    last = int(base.rsplit(".", 1)[1])
    host_ip, manager, registry = (f"{prefix}.{last + i}" for i in (1, 2, 3))
    metadata = f"169.254.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    listener = None
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", far_end)
        _ip("link", "set", far_end, "netns", ns)
        _ip("addr", "add", f"{host_ip}/29", "dev", host_end)
        _ip("link", "set", host_end, "up")
        for address in (f"{manager}/29", f"{registry}/29", f"{metadata}/32"):
            _ip("-n", ns, "addr", "add", address, "dev", far_end)
        _ip("-n", ns, "link", "set", far_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "add", "default", "via", host_ip)
        _ip("route", "add", f"{metadata}/32", "via", manager, "dev", host_end)
        listener = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", LISTEN,
                                     str(PORT)], stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        yield Outside(manager, registry, metadata)
    finally:
        if listener is not None:
            listener.kill()
            listener.wait()
        subprocess.run(["ip", "route", "del", f"{metadata}/32"], capture_output=True)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A port the host listens on, on every address (like a manager bound to 0.0.0.0)."""
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(64)
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    server.close()


def _host_address() -> str:
    """One of the host's own addresses on a real interface (not loopback, not a bridge)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        name, address = fields[1], fields[3].split("/")[0]
        if not name.startswith(("docker", "br-", "gs", "veth")):
            return address
    pytest.skip("the host has no global IPv4 address besides bridges")


@pytest.fixture
async def fence(
    runtime: DockerRuntime, outside: Outside
) -> AsyncIterator[Callable[[NetworkSettings], SessionNetwork]]:
    """``fence(settings)``: the node's session network and fence, the manager in the outside
    namespace; all of it removed afterwards (containers first)."""
    made: list[SessionNetwork] = []

    def make(settings: NetworkSettings) -> SessionNetwork:
        network = SessionNetwork(runtime, runtime.node_name, settings,
                                 f"http://{outside.manager}:{PORT}")
        made.append(network)
        return network

    yield make
    for state in await runtime.list_managed():
        await runtime.remove_container(state.container_id)
    for sandbox in await runtime.list_sandboxes(Fence(runtime.node_name).network):
        await runtime.remove_sandbox(sandbox.id)
    if made:
        await made[-1].remove()


def _spec(runtime: DockerRuntime, base_image: str, network: str,
          command: tuple[str, ...] | None = None, owner: str = "alice") -> ContainerSpec:
    session = SessionSpec(session_id=f"iso{uuid.uuid4().hex[:10]}", owner=owner,
                          image=base_image, type="interactive", cpu=250, mem=128 * 1024**2,
                          command=command)
    options = SpecOptions(node_name=runtime.node_name, network=network,
                          ipv6_off=ipv6_available())
    return build(session, options)


async def _running(runtime: DockerRuntime, spec: ContainerSpec,
                   pool: Sandboxes | None = None) -> ContainerState:
    """Started, as a look finds it (with its address: a start alone does not inspect); in a
    warm network sandbox of ``pool``'s when given."""
    if pool is not None:
        sandbox = pool.take(spec.session_id, spec.owner, spec.image)
        assert sandbox is not None
        spec = replace(spec, network=f"container:{sandbox}")
    await runtime.ensure_running(spec)
    state = await runtime.find(spec.session_id)
    assert state is not None and state.running
    assert bool(state.sandbox) is (pool is not None)
    return state


async def _reach(runtime: DockerRuntime, session_id: str, host: str, port: int) -> str:
    done = await runtime.exec(session_id, ["python3", "-c", PROBE, host, str(port)],
                              timeout=15)
    assert done.exit_code == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("sandboxed", [False, True], ids=["wired", "in-sandboxes"])
async def test_sessions_reach_only_what_the_policy_allows(
    runtime: DockerRuntime, base_image: str, fence: Callable[[NetworkSettings], SessionNetwork],
    outside: Outside, host_listener: int, sandboxed: bool,
) -> None:
    # Wired into the network by Docker, or in warm network sandboxes (two owners' sessions,
    # each in its own): the same fence holds.
    network = fence(NetworkSettings())
    info = await network.start()
    await network.start()  # a second start (an agent restart) changes nothing
    pool = None
    if sandboxed:
        pool = Sandboxes(runtime, network.name, warm=2, user="1000:1000",
                         sysctls=NO_IPV6 if ipv6_available() else {})
        pool.seed(base_image)
        async with asyncio.timeout(scaled(30)):
            while pool.counts() != (0, 2):
                await asyncio.sleep(0.05)
    a = await _running(runtime, _spec(runtime, base_image, network.name), pool)
    b = await _running(runtime, _spec(runtime, base_image, network.name, owner="bob",
                                      command=("python3", "-c", LISTEN, str(PORT))), pool)
    assert a.ip_address and b.ip_address and a.ip_address != b.ip_address
    host_ip = _host_address()

    async def reach(host: str, port: int = PORT) -> str:
        return await _reach(runtime, a.session_id, host, port)

    assert (await reach(b.ip_address)).startswith("closed")  # another session
    assert (await reach(info.gateway, host_listener)).startswith("closed")  # the host
    assert (await reach(host_ip, host_listener)).startswith("closed")  # a 0.0.0.0 manager
    assert (await reach(outside.manager)).startswith("closed")  # the manager elsewhere
    assert (await reach(outside.metadata)).startswith("closed")  # link-local metadata
    assert await reach(outside.registry) == "open"  # outside networks stay reachable
    # the host still reaches a session's apps at its address
    opened = await asyncio.to_thread(socket.create_connection, (b.ip_address, PORT), 5)
    opened.close()
    if ipv6_available():
        v6 = await runtime.exec(a.session_id, ["cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"])
        assert v6.stdout.strip() == "1"
    if pool is not None:
        await pool.close()


async def test_egress_off_and_denied_networks(
    runtime: DockerRuntime, base_image: str, fence: Callable[[NetworkSettings], SessionNetwork],
    outside: Outside,
) -> None:
    denied = fence(NetworkSettings(deny=[f"{outside.registry}/32"]))
    await denied.start()
    a = await runtime.ensure_running(_spec(runtime, base_image, denied.name))
    assert (await _reach(runtime, a.session_id, outside.registry, PORT)).startswith("closed")
    await fence(NetworkSettings()).start()  # the admin lifts it: the rules are replaced
    assert await _reach(runtime, a.session_id, outside.registry, PORT) == "open"
    await fence(NetworkSettings(egress="none")).start()
    assert (await _reach(runtime, a.session_id, outside.registry, PORT)).startswith("closed")


async def test_stopping_keeps_the_fence_while_sessions_run(
    runtime: DockerRuntime, base_image: str, fence: Callable[[NetworkSettings], SessionNetwork],
    outside: Outside,
) -> None:
    network = fence(NetworkSettings())
    await network.start()
    a = await runtime.ensure_running(_spec(runtime, base_image, network.name))
    assert await network.stop() is False  # a session still runs: fenced until adopted
    assert (await _reach(runtime, a.session_id, outside.manager, PORT)).startswith("closed")
    await runtime.remove(a.session_id)
    assert await network.stop() is True
    assert await runtime.network(network.name) is None
    chains = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert network.fence.forward_chain not in chains and network.fence.input_chain not in chains
