"""Warm network sandboxes with real containers (agent/isolation/sandboxes.py): a session joins
one of its owner's, never another owner's nor one another session is in; an idle one is reused
once the last session's container is gone; a sandbox that stopped is no way in; the pool's end
removes the idle ones only; a restarted agent takes back those of sessions left running."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest

from gpuslice.agent.isolation import sandboxes as pool_module
from gpuslice.agent.isolation.policy import Fence
from gpuslice.agent.isolation.sandboxes import Sandboxes, sandbox_config
from gpuslice.agent.runtime import ContainerState, DockerRuntime
from gpuslice.agent.runtime.sandbox_ops import LABEL_SANDBOX, SandboxUnusable
from gpuslice.agent.runtime.spec import ContainerSpec
from tests.waits import scaled

pytestmark = pytest.mark.docker
SpecOf = Callable[[str], ContainerSpec]


@pytest.fixture
async def network(runtime: DockerRuntime) -> str:
    """The node's session network (inter-container traffic off), as the fence makes it; the
    runtime fixture removes it, its sandboxes and containers first."""
    fence = Fence(runtime.node_name)
    await runtime.ensure_network(fence.network, fence.bridge, {"gpuslice.node": fence.node})
    return fence.network


@pytest.fixture
def spec_of(make_spec: Callable[..., ContainerSpec], network: str) -> SpecOf:
    """``spec_of(owner)``: a session of ``owner``'s in the node's session network."""
    return lambda owner: replace(make_spec(owner=owner), network=network)


@pytest.fixture
async def pool(runtime: DockerRuntime, network: str, base_image: str
               ) -> AsyncIterator[Sandboxes]:
    sandboxes = Sandboxes(runtime, network, warm=2, user="1000:1000", sysctls={})
    sandboxes.seed(base_image)
    await _until(lambda: sandboxes.counts() == (0, 2))
    yield sandboxes
    await sandboxes.close()


async def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(scaled(timeout)):
        while not check():
            await asyncio.sleep(0.05)


async def _start(runtime: DockerRuntime, pool: Sandboxes, spec: ContainerSpec) -> ContainerState:
    """What the agent's start does (``SessionActions._ensure_running``), and a look after."""
    sandbox = pool.take(spec.session_id, spec.owner, spec.image)
    assert sandbox is not None, "a warm sandbox was ready"
    state = await runtime.ensure_running(replace(spec, network=f"container:{sandbox}"))
    pool.joined(spec.session_id, state.sandbox)
    found = await runtime.find(spec.session_id)
    assert found is not None and found.running and found.sandbox == sandbox
    return found


async def _end(runtime: DockerRuntime, pool: Sandboxes, session_id: str) -> None:
    await runtime.remove(session_id)
    pool.release(session_id)


async def test_a_session_joins_a_sandbox_of_its_owner_and_has_its_address(
    runtime: DockerRuntime, pool: Sandboxes, network: str, spec_of: SpecOf
) -> None:
    spec = spec_of("alice")
    first = await _start(runtime, pool, spec)
    listed = {s.id: s for s in await runtime.list_sandboxes(network)}
    assert first.ip_address == listed[first.sandbox].addresses[network]
    # its name resolves through the sandbox's namespace: Docker's DNS there answers
    done = await runtime.exec(spec.session_id, ["cat", "/etc/resolv.conf"])
    assert "nameserver 127.0.0.11" in done.stdout

    # bob's session never gets alice's sandbox, free or not
    await _end(runtime, pool, spec.session_id)
    bob = await _start(runtime, pool, spec_of("bob"))
    assert bob.sandbox != first.sandbox
    # alice's next session gets hers back, once the last one's container is gone
    again = await _start(runtime, pool, spec_of("alice"))
    assert again.sandbox == first.sandbox and again.ip_address == first.ip_address


async def test_two_live_sessions_never_share_a_sandbox(
    runtime: DockerRuntime, pool: Sandboxes, network: str, spec_of: SpecOf
) -> None:
    specs = [spec_of("alice") for _ in range(2)]
    one = await _start(runtime, pool, specs[0])
    await _end(runtime, pool, specs[0].session_id)
    two = await _start(runtime, pool, specs[1])  # takes the one released
    three_spec = spec_of("alice")
    three = pool.take(three_spec.session_id, "alice", three_spec.image)
    assert two.sandbox == one.sandbox
    assert three not in (None, two.sandbox)  # a spare: alice's own is taken
    # a stop is not enough: only the container's removal frees the sandbox
    await runtime.stop_container(two.container_id, grace_s=1)
    four = spec_of("alice")
    assert pool.take(four.session_id, "alice", four.image) != two.sandbox


async def test_a_stopped_sandbox_is_no_way_in_and_leaves_nothing(
    runtime: DockerRuntime, pool: Sandboxes, network: str, spec_of: SpecOf
) -> None:
    spec = spec_of("alice")
    sandbox = pool.take(spec.session_id, "alice", spec.image)
    assert sandbox is not None
    subprocess.run(["docker", "stop", "-t", "0", sandbox], check=True, capture_output=True)
    with pytest.raises(SandboxUnusable):
        await runtime.ensure_running(replace(spec, network=f"container:{sandbox}"))
    assert await runtime.find(spec.session_id) is None  # the container it made went again
    pool.unusable(spec.session_id)
    state = await runtime.ensure_running(spec)  # the direct way, fenced all the same
    assert state.running
    found = await runtime.find(spec.session_id)
    assert found is not None and found.sandbox == "" and network in found.addresses
    await _until(lambda: sandbox not in {s.id for s in pool._idle_ones()})


async def test_closing_removes_idle_sandboxes_and_a_restart_takes_back_those_in_use(
    runtime: DockerRuntime, network: str, base_image: str, spec_of: SpecOf
) -> None:
    pool = Sandboxes(runtime, network, warm=2, user="1000:1000", sysctls={})
    pool.seed(base_image)
    await _until(lambda: pool.counts() == (0, 2))
    spec = spec_of("alice")
    running = await _start(runtime, pool, spec)
    await pool.close()  # the agent stops; the session stays running
    listed = await runtime.list_sandboxes(network)
    assert [s.id for s in listed] == [running.sandbox]
    assert (await runtime.find(spec.session_id)).running  # type: ignore[union-attr]

    later = Sandboxes(runtime, network, warm=1, user="1000:1000", sysctls={})
    stray = await runtime.start_sandbox(
        sandbox_config(base_image, network, runtime.node_name, user="1000:1000", sysctls={}),
        f"{pool_module.NAME_PREFIX}{uuid.uuid4().hex[:12]}")  # an earlier run's spare, say
    await later.adopt({spec.session_id: (running.sandbox, "alice")})
    assert [s.id for s in await runtime.list_sandboxes(network)] == [running.sandbox]
    assert stray not in runtime.sandbox_addresses
    await _end(runtime, later, spec.session_id)  # then it is alice's, idle
    bob = spec_of("bob")
    assert later.take(bob.session_id, "bob", bob.image) is None  # (no spare made yet)
    alice = spec_of("alice")
    assert later.take(alice.session_id, "alice", alice.image) == running.sandbox
    await later.close()


async def test_an_interactive_session_starts_again_with_its_sandbox(
    runtime: DockerRuntime, pool: Sandboxes, network: str, spec_of: SpecOf
) -> None:
    # The Docker Engine restarted: every container stopped, the sandbox too.
    spec = spec_of("alice")
    first = await _start(runtime, pool, spec)
    subprocess.run(["docker", "stop", "-t", "0", first.container_id, first.sandbox],
                   check=True, capture_output=True)
    again = await runtime.ensure_running(replace(spec, network=f"container:{first.sandbox}"))
    assert again.running
    found = await runtime.find(spec.session_id)
    assert found is not None and found.sandbox == first.sandbox and found.ip_address


async def test_idle_sandboxes_of_an_image_go_when_it_is_removed(
    runtime: DockerRuntime, pool: Sandboxes, base_image: str
) -> None:
    await pool.drop_image(base_image)
    assert pool.counts() == (0, 0)
    assert await runtime.list_sandboxes(pool.network) == []


def test_a_sandbox_is_unprivileged_small_and_labelled() -> None:
    config = sandbox_config("img:1", "gpuslice-n1", "n1", user="1000:1000",
                            sysctls={"net.ipv6.conf.all.disable_ipv6": "1"})
    host = config["HostConfig"]
    assert config["User"] == "1000:1000" and config["Image"] == "img:1"
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Privileged"] is False and host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "gpuslice-n1" and host["PidsLimit"] == 8
    assert host["Sysctls"] == {"net.ipv6.conf.all.disable_ipv6": "1"}
    assert config["Labels"] == {LABEL_SANDBOX: "gpuslice-n1", "gpuslice.node": "n1"}


async def test_after_the_engine_was_away_stopped_idle_sandboxes_are_dropped(
    runtime: DockerRuntime, pool: Sandboxes
) -> None:
    [stopped, *_] = [s.id for s in pool._idle_ones()]
    subprocess.run(["docker", "stop", "-t", "0", stopped], check=True, capture_output=True)
    await pool.recheck()  # (its die event was missed: the engine restarted)
    assert stopped not in {s.id for s in pool._idle_ones()}
    await _until(lambda: pool.counts() == (0, 2))  # made again
    async with asyncio.timeout(scaled(10)):
        while stopped in {s.id for s in await runtime.list_sandboxes(pool.network)}:
            await asyncio.sleep(0.05)  # and the stopped one removed
