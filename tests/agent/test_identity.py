"""Agents sharing one Docker Engine: each touches only its own containers (its agent id), a
second live agent of one name is refused, and a container adopted from another agent (a
platform restored into a new data directory) is made again with this node's mounts.

Each agent runs whole (``Agent``) against a stand-in manager at the HTTP edge, on the real
Docker Engine, as in ``test_service.py``."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from gpuslice.agent.accelerators.mock import MockAccelerator
from gpuslice.agent.identity import NameTaken
from gpuslice.agent.manager_link import ManagerLink
from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.agent.service import Agent
from gpuslice.agent.settings import AgentSettings, MockGpu
from gpuslice.session_tools import CONTAINER_ENDPOINT_DIR
from tests.agent.conftest import remove_node
from tests.agent.stand_in_manager import MANAGER, StandInManager, assignment, until
from tests.waits import scaled

pytestmark = pytest.mark.docker


def _agent(node: str, data_dir: Path, manager: StandInManager) -> Agent:
    settings = AgentSettings(
        node_name=node, manager_url=MANAGER, join_token="gsj_x", data_dir=data_dir,
        accelerator="mock", fgpu_per_gpu=3, gpu=[MockGpu(model="Mock", memory="12g", sms=36)],
        network={"warm_sandboxes": 0},
    )
    link = ManagerLink(MANAGER, settings.data_dir, transport=httpx.MockTransport(manager))
    return Agent(settings, accelerator=MockAccelerator(node, settings.gpu), link=link,
                 say=lambda _line: None)


@asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[Agent]:
    """``agent`` running until the block ends (then stopped, its containers left running)."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: agent.ready.is_set() or task.done())
        if task.done():
            task.result()  # its failure
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, scaled(30))


@pytest.fixture
async def node(tmp_path: Path, base_image: str) -> AsyncIterator[str]:
    """A node name of this test's own; every container of that name is removed after."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    async with DockerRuntime(node_name=name, files_root=tmp_path / "cleanup") as runtime:
        await remove_node(runtime)


async def passes_done(agent: Agent, count: int = 2) -> None:
    """Until ``count`` more reconcile passes have run to their end and no step runs."""
    done, reconcile = [0], agent.steps.reconcile

    async def counted(desired: object) -> None:
        await reconcile(desired)  # type: ignore[arg-type]
        done[0] += 1

    agent.steps.reconcile = counted  # type: ignore[method-assign]
    agent.steps.kick.set()
    await until(lambda: done[0] >= count and not agent.steps.busy)


async def left_running(node: str, data_dir: Path, image: str) -> ContainerState:
    """A session's container made by an agent of ``node`` in ``data_dir``, then that agent
    stopped (its sessions' containers run on, as after a Ctrl-C)."""
    manager, sid = StandInManager(), f"s{uuid.uuid4().hex[:10]}"
    agent = _agent(node, data_dir, manager)
    async with running(agent):
        manager.sessions = [assignment(agent, image, sid)]
        manager.change()
        await until(lambda: "RUNNING" in manager.statuses(sid))
        made = await agent.runtime.find(sid)
    assert made is not None and made.owned
    return made


async def test_a_second_live_agent_of_one_name_on_one_engine_is_refused(
    node: str, tmp_path: Path
) -> None:
    first = _agent(node, tmp_path / "a", StandInManager())
    async with running(first):
        second = _agent(node, tmp_path / "b", StandInManager())
        with pytest.raises(NameTaken) as refused:
            await second.run(asyncio.Event())
    said = str(refused.value)
    assert said.startswith(f"node name {node!r} is already used on this Docker Engine by a "
                           f"live agent (pid {os.getpid()}")
    assert "\n" not in said and "another name" in said
    # Once the first is gone, the name is free again (the kernel let go of it).
    async with running(_agent(node, tmp_path / "b", StandInManager())):
        pass


async def test_an_agent_never_removes_another_agents_container_of_its_name(
    node: str, tmp_path: Path, base_image: str
) -> None:
    # Two platforms whose nodes have one name (one stopped, its sessions left running): the
    # other's manager does not know that session, yet it is not this agent's to remove.
    before = await left_running(node, tmp_path / "a", base_image)
    sid = before.session_id

    mine = StandInManager()
    second = _agent(node, tmp_path / "b", mine)
    async with running(second):
        await passes_done(second)
        seen = await second.runtime.find(sid)
        assert seen is not None and not seen.owned
    assert mine.statuses(sid) == []  # nothing said of a session that is not its own
    assert not (tmp_path / "b" / "sessions" / sid).exists()  # nor an endpoint served for it
    after = await second.runtime.find(sid)
    assert after is not None and after.running and after.container_id == before.container_id


async def test_an_adopted_container_with_another_agents_mounts_is_made_again(
    node: str, tmp_path: Path, base_image: str
) -> None:
    # A platform restored into a new data directory: its manager knows the session, which
    # runs in a container made by the old data directory's agent (endpoint socket there).
    made = await left_running(node, tmp_path / "old", base_image)
    sid = made.session_id

    restored = StandInManager()
    second = _agent(node, tmp_path / "new", restored)
    restored.sessions = [assignment(second, base_image, sid, status="RUNNING")]
    async with running(second):
        await until(lambda: any(r.get("restarted") for s, r in restored.reports if s == sid))
        [told] = [r for s, r in restored.reports if s == sid and r.get("restarted")]
        assert told["status"] == "RUNNING"
        assert told["reason"].startswith("restarted: its container was made by another agent")
        assert str(tmp_path / "old") in told["reason"]
        now = await second.runtime.find(sid)
        assert now is not None and now.container_id != made.container_id and now.owned
        assert now.mounts[CONTAINER_ENDPOINT_DIR].startswith(str(tmp_path / "new"))
        asked = await second.runtime.exec(sid, [
            "python3", "-c",
            "import json, gpuslice_endpoint as e; print(json.dumps(e.call('GET', '/v1/session')))",
        ])
        assert asked.exit_code == 0, asked.stderr  # its in-session endpoint answers
        assert json.loads(asked.stdout)["session_id"] == sid
        await passes_done(second)  # made again once, not on every pass
        assert len([r for s, r in restored.reports if s == sid and r.get("restarted")]) == 1
