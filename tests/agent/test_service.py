"""The whole agent against a stand-in manager (at the HTTP edge) and the real Docker Engine:
it joins in wire units, starts what is assigned with the manager's slice, answers a request
once, heartbeats usage, and stops a session when told."""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuslice.agent import loops
from gpuslice.agent.accelerators.mock import MockAccelerator
from gpuslice.agent.manager_link import ManagerLink
from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.service import Agent
from gpuslice.agent.settings import AgentSettings, MockGpu
from gpuslice.common.schemas.agents import AgentRequest, ExecAsk
from tests.agent.conftest import remove_node
from tests.agent.stand_in_manager import MANAGER, StandInManager, assignment, until
from tests.waits import scaled

pytestmark = pytest.mark.docker


@pytest.fixture
async def manager() -> StandInManager:
    return StandInManager()


@pytest.fixture
async def agent_running(
    manager: StandInManager, base_image: str, tmp_path: Path
) -> AsyncIterator[Agent]:
    node = f"test-{uuid.uuid4().hex[:10]}"
    settings = AgentSettings(
        node_name=node, manager_url=MANAGER, join_token="gsj_x", data_dir=tmp_path / "agent",
        accelerator="mock", fgpu_per_gpu=3, gpu=[MockGpu(model="Mock", memory="12g", sms=36)],
    )
    link = ManagerLink(MANAGER, settings.data_dir, transport=httpx.MockTransport(manager))
    accelerator = MockAccelerator(node, settings.gpu)
    agent = Agent(settings, accelerator=accelerator, link=link, say=lambda _line: None)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, scaled(30))
        async with DockerRuntime(node_name=node, files_root=tmp_path / "agent") as runtime:
            await remove_node(runtime)


async def test_the_agent_runs_a_session_answers_once_and_stops_it(
    agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    agent, sid = agent_running, f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, sid)]
    manager.change()
    await until(lambda: "RUNNING" in manager.statuses(sid))
    assert manager.statuses(sid)[:2] == ["PREPARING", "RUNNING"]
    assert manager.registered[0]["device_capacity"] == 3000
    state = await agent.runtime.find(sid)
    assert state is not None and state.allocation["devices"][0]["fraction"] == "0.3333"

    ask = ExecAsk(command=["sh", "-c", "echo $GPUSLICE_GPU_FRACTION"], timeout_ms=20_000)
    manager.requests = [AgentRequest(id="r-1", session_id=sid, ask=ask).model_dump(mode="json")]
    manager.change()
    await until(lambda: "r-1" in manager.answers)
    assert manager.answers["r-1"]["stdout"] == "0.3333\n"
    await until(lambda: any(u.get("cpu") is not None for h in manager.heartbeats
                            for u in h["usage"] if u["session_id"] == sid))

    manager.sessions = [assignment(agent, base_image, sid, status="TERMINATING",
                                   desired="stopped")]
    manager.change()
    await until(lambda: "TERMINATED" in manager.statuses(sid))
    # removed just after the report (the slice is free first)
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.find(sid) is not None:
            await asyncio.sleep(0.05)
    assert list(manager.answers) == ["r-1"]
    # Its end is the agent's own report: no news, so the assignments still list the session,
    # stopped, until something else changes. Stopped once, it is not stopped again: its logs
    # come (the end's last report), then a bounded look for another end (it can only pass
    # too easily on a slow machine).
    await until(lambda: any(r["status"] == "TERMINATED" and r.get("logs") is not None
                            for s, r in manager.reports if s == sid))
    await asyncio.sleep(0.5)
    assert manager.told_end_once(sid), manager.reports


async def test_heartbeats_go_on_while_docker_is_too_busy_to_report(
    agent_running: Agent, manager: StandInManager
) -> None:
    # While dockerd creates containers, listing them can take many seconds; the node must
    # still heartbeat (the last complete report again), or the manager calls it lost.
    await until(lambda: len(manager.heartbeats) >= 1)
    collector = agent_running.usage_collector
    assert collector is not None
    fresh, release = collector.heartbeat, asyncio.Event()
    stuck_calls = 0

    async def stuck() -> Any:
        nonlocal stuck_calls
        stuck_calls += 1
        await release.wait()
        return await fresh()

    collector.heartbeat = stuck  # type: ignore[method-assign]
    # A collection starts once the one before it was sent: the one in flight when it got
    # stuck is done and sent by the time one is stuck.
    await until(lambda: stuck_calls > 0, timeout=10)
    seen = len(manager.heartbeats)
    await until(lambda: len(manager.heartbeats) >= seen + 3, timeout=10)
    assert manager.heartbeats[-1] == manager.heartbeats[seen - 1]  # the last report, again
    release.set()
    collector.heartbeat = fresh  # type: ignore[method-assign]
    await until(lambda: len(manager.heartbeats) >= seen + 6)


async def test_sessions_start_in_warm_network_sandboxes_of_their_owner(
    agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    agent = agent_running
    await until(agent.ready.is_set)
    pool = agent.sandboxes
    assert pool is not None  # the fence is on (root, iptables): sandboxes come with it
    await until(lambda: pool.counts()[1] >= 2)  # spares of the default session image
    first, bob = f"s{uuid.uuid4().hex[:10]}", f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, first),
                        assignment(agent, base_image, bob, owner="bob")]
    manager.change()
    await until(lambda: all("RUNNING" in manager.statuses(s) for s in (first, bob)))
    mine, theirs = await agent.runtime.find(first), await agent.runtime.find(bob)
    assert mine is not None and theirs is not None
    assert mine.sandbox and theirs.sandbox and mine.sandbox != theirs.sandbox
    assert mine.ip_address and mine.ip_address != theirs.ip_address

    manager.sessions = [assignment(agent, base_image, first, status="TERMINATING",
                                   desired="stopped"),
                        assignment(agent, base_image, bob, owner="bob")]
    manager.change()
    await until(lambda: "TERMINATED" in manager.statuses(first))
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.find(first) is not None:
            await asyncio.sleep(0.05)
    second = f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, bob, owner="bob"),
                        assignment(agent, base_image, second)]
    manager.change()
    await until(lambda: "RUNNING" in manager.statuses(second))
    again = await agent.runtime.find(second)
    assert again is not None and again.sandbox == mine.sandbox  # alice's, free again


async def test_a_stop_the_manager_asks_for_needs_no_reconcile_pass(
    agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    # The session queued behind a full node waits on this stop: it is taken as the
    # assignments arrive, by the container's name, not after a listing of the node.
    agent, sid = agent_running, f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, sid)]
    manager.change()
    await until(lambda: "RUNNING" in manager.statuses(sid))
    passes = 0

    async def no_pass(_desired: Any) -> None:
        nonlocal passes
        passes += 1

    agent.steps.reconcile = no_pass  # type: ignore[method-assign]
    manager.sessions = [assignment(agent, base_image, sid, status="TERMINATING",
                                   desired="stopped")]
    manager.change()
    await until(lambda: "TERMINATED" in manager.statuses(sid))
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.find(sid) is not None:
            await asyncio.sleep(0.05)
    assert manager.told_end_once(sid), manager.reports


async def test_the_agents_own_reports_coming_back_start_no_reconcile_pass(
    agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    agent, sid = agent_running, f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, sid)]
    manager.change()
    await until(lambda: "RUNNING" in manager.statuses(sid) and sid not in agent.steps.busy)
    # A pass under way (the agent's first) ends before counting.
    await until(lambda: not agent.steps.kick.is_set())
    await asyncio.sleep(0.3)
    passes = 0
    reconcile = agent.steps.reconcile

    async def counted(desired: Any) -> None:
        nonlocal passes
        passes += 1
        await reconcile(desired)

    agent.steps.reconcile = counted  # type: ignore[method-assign]
    manager.sessions = [assignment(agent, base_image, sid, status="RUNNING")]  # its own word
    manager.change()
    await until(lambda: agent.steps.desired is not None
                and agent.steps.desired.version == manager.version)
    await asyncio.sleep(0.3)  # a bounded look: it can only pass too easily on a slow machine
    assert passes == 0
    manager.sessions = [assignment(agent, base_image, sid, status="RUNNING", env={"A": "1"})]
    manager.change()  # not the agent's doing: looked at
    await until(lambda: passes >= 1)


@pytest.fixture
def no_safety_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """No reconcile pass on the safety timer (each 10 s) while a test counts passes; ask for
    it before the agent, which reads the timer as it waits."""
    monkeypatch.setattr(loops, "RECONCILE_SAFETY_S", 3600.0)


@pytest.fixture
def agent_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The agent's log from its start on (ask for it before the agent)."""
    caplog.set_level(logging.INFO, logger="gpuslice.agent")
    return caplog


def counted_passes(agent: Agent) -> list[str]:
    """From now on, one entry per reconcile pass the agent runs: what kicked it last (the
    function and line that set the kick), or "timer"."""
    passes: list[str] = []
    kicked_by, reconcile, kick = ["timer"], agent.steps.reconcile, agent.steps.kick.set

    def recorded_kick() -> None:
        caller = sys._getframe(1)
        kicked_by[0] = f"{caller.f_code.co_name}:{caller.f_lineno}"
        kick()

    async def counted(desired: Any) -> None:
        passes.append(kicked_by[0])
        kicked_by[0] = "timer"
        await reconcile(desired)

    agent.steps.kick.set = recorded_kick  # type: ignore[method-assign]
    agent.steps.reconcile = counted  # type: ignore[method-assign]
    return passes


async def test_sessions_that_start_and_end_as_asked_need_no_reconcile_pass(
    no_safety_passes: None, agent_log: pytest.LogCaptureFixture, agent_running: Agent,
    manager: StandInManager, base_image: str
) -> None:
    # Each pass lists the node's containers, work for dockerd while it starts others (two or
    # three a session before): a step that did what it set out to do, and the events of the
    # agent's own containers, are followed by none.
    agent = agent_running
    # Its first passes (the first assignments; Docker's events followed, on a busy machine
    # later) are over before counting.
    await until(lambda: agent.steps.desired is not None and any(
        "docker events: connected" in r.getMessage() for r in agent_log.records))
    await until(lambda: not agent.steps.kick.is_set())
    await asyncio.sleep(0.3)
    passes = counted_passes(agent)
    shell, batch = f"s{uuid.uuid4().hex[:10]}", f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, shell),
                        assignment(agent, base_image, batch, type="batch", command=["true"])]
    manager.change()
    await until(lambda: "RUNNING" in manager.statuses(shell) and not agent.steps.busy
                and "TERMINATED" in manager.statuses(batch))
    manager.sessions = [assignment(agent, base_image, shell, status="TERMINATING",
                                   desired="stopped")]
    manager.change()
    await until(lambda: "TERMINATED" in manager.statuses(shell) and not agent.steps.busy)
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.list_managed():
            await asyncio.sleep(0.05)
    # The removals' events (a bounded look: it can only pass too easily on a slow machine;
    # an event that comes while its step runs is not even looked at, so there is none to wait
    # for).
    await asyncio.sleep(0.5)
    assert passes == []
    assert manager.told_end_once(shell) and manager.told_end_once(batch), manager.reports
    assert not agent.endpoint._sites  # the end steps closed their sessions' sockets


async def test_a_session_told_to_stop_while_it_starts_is_stopped_once_started(
    no_safety_passes: None, agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    # The answer came while the start step ran, so it took no step of its own: the start's
    # end sees that the session moved and kicks a pass, which stops it.
    agent, sid = agent_running, f"s{uuid.uuid4().hex[:10]}"
    gate, ensure_running = asyncio.Event(), agent.runtime.ensure_running

    async def held(spec: Any) -> Any:
        await gate.wait()
        return await ensure_running(spec)

    agent.runtime.ensure_running = held  # type: ignore[method-assign]
    manager.sessions = [assignment(agent, base_image, sid)]
    manager.change()
    await until(lambda: sid in agent.steps.busy)
    manager.sessions = [assignment(agent, base_image, sid, status="TERMINATING",
                                   desired="stopped")]
    manager.change()
    await until(lambda: agent.steps.desired is not None
                and agent.steps.desired.version == manager.version)
    gate.set()
    await until(lambda: "TERMINATED" in manager.statuses(sid), timeout=15)
    assert manager.statuses(sid)[:2] == ["PREPARING", "RUNNING"]
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.find(sid) is not None:
            await asyncio.sleep(0.05)


async def test_an_ended_session_in_older_assignments_is_not_reported_again(
    agent_running: Agent, manager: StandInManager, base_image: str
) -> None:
    # An answer built before the manager applied the agent's end report still lists the
    # session (RUNNING): its container is gone, but the end is told already; another report
    # would change nothing there and cost a request.
    agent, sid = agent_running, f"s{uuid.uuid4().hex[:10]}"
    manager.sessions = [assignment(agent, base_image, sid, type="batch", command=["true"])]
    manager.change()
    await until(lambda: "TERMINATED" in manager.statuses(sid) and sid not in agent.steps.busy)
    async with asyncio.timeout(scaled(10)):
        while await agent.runtime.find(sid) is not None:
            await asyncio.sleep(0.05)
    manager.sessions = [assignment(agent, base_image, sid, type="batch", command=["true"],
                                   status="RUNNING")]
    manager.change()
    await until(lambda: agent.steps.desired is not None
                and agent.steps.desired.version == manager.version)
    assert agent.steps.desired is not None
    await agent.steps.reconcile(agent.steps.desired)
    await asyncio.sleep(0.3)  # a bounded look for a step it started: none should report
    assert manager.statuses(sid)[:2] == ["PREPARING", "RUNNING"]
    assert manager.told_end_once(sid), manager.reports
