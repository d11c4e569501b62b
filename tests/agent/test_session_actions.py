"""A stop the manager asks for, step by step, against a Docker and a manager the test holds
still: its end is told once the container's processes are gone (its ``die`` event), not once
dockerd has also cleaned the container up (it answers nothing about it until then, logs
included); the logs follow in a report of their own, and only then is the container removed.
An exit by itself is told once, with its logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gpuslice.agent.decide import Act, Action
from gpuslice.agent.manager_link import LinkError
from gpuslice.agent.runtime.spec import SpecOptions
from gpuslice.agent.sessions import SessionActions
from gpuslice.agent.settings import AgentSettings
from gpuslice.common.schemas.agents import StateReport
from gpuslice.common.schemas.sessions import SessionStatus
from tests.waits import scaled

SID = "s-1"
STOP = Action(Act.STOP, SID, SessionStatus.TERMINATED, reason="stopped")
EXITED = Action(Act.FINISH, SID, SessionStatus.TERMINATED, 0, "exited with code 0", "c-1")


class CleaningDocker:
    """A dockerd still cleaning the container up: stop and logs return when ``cleaned``."""

    def __init__(self) -> None:
        self.cleaned = asyncio.Event()
        self.calls: list[str] = []

    async def stop_container(self, container_id: str, grace_s: int = 10) -> None:
        self.calls.append("stop")
        await self.cleaned.wait()
        self.calls.append("stopped")

    async def logs(self, session_id: str, *, tail: int, container_id: str | None) -> str:
        await self.cleaned.wait()
        return "bye\n"

    async def remove(self, session_id: str, container_id: str | None = None) -> bool:
        self.calls.append("remove")
        return True


class Manager:
    def __init__(self, fail: bool = False) -> None:
        self.reports: list[StateReport] = []
        self.fail = fail

    async def report(self, session_id: str, report: StateReport) -> str:
        if self.fail:
            raise LinkError("the manager is away")
        self.reports.append(report)
        return "ok"

    def told(self) -> list[tuple[SessionStatus, str | None]]:
        return [(r.status, r.logs) for r in self.reports]


def actions(tmp_path: Path, docker: CleaningDocker, manager: Manager) -> SessionActions:
    settings = AgentSettings(node_name="n", manager_url="http://m.test", join_token="gsj_x",
                             data_dir=tmp_path)
    return SessionActions(settings, docker, manager,  # type: ignore[arg-type]
                          SpecOptions(node_name="n"), say=lambda _line: None)


async def until(check: Any) -> None:
    async with asyncio.timeout(scaled(5)):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_stop_is_told_when_the_container_dies_and_its_logs_after_the_clean_up(
    tmp_path: Path,
) -> None:
    docker, manager = CleaningDocker(), Manager()
    steps = actions(tmp_path, docker, manager)
    step = asyncio.create_task(steps.do(STOP, None))
    await until(lambda: docker.calls == ["stop"])
    # Bounded looks (they can only pass too easily on a slow machine): nothing told yet.
    await asyncio.sleep(0.05)
    assert manager.reports == []  # still running: nothing told
    steps.died("another-session")  # another container's death says nothing of this one
    await asyncio.sleep(0.05)
    assert manager.reports == []
    steps.died(SID)
    await until(lambda: manager.reports)
    assert manager.told() == [(SessionStatus.TERMINATED, None)]  # the slice is free now
    assert docker.calls == ["stop"]
    docker.cleaned.set()
    await step
    ended = SessionStatus.TERMINATED
    assert manager.told() == [(ended, None), (ended, "bye\n")]
    assert docker.calls == ["stop", "stopped", "remove"]  # removed once the logs are kept
    assert steps.reported[SID] is SessionStatus.TERMINATED


async def test_without_its_die_event_a_stop_is_told_once_with_its_logs(tmp_path: Path) -> None:
    docker, manager = CleaningDocker(), Manager()
    steps = actions(tmp_path, docker, manager)
    step = asyncio.create_task(steps.do(STOP, None))
    await until(lambda: docker.calls == ["stop"])
    docker.cleaned.set()  # the stop returns first (the event stream is away)
    await step
    assert manager.told() == [(SessionStatus.TERMINATED, "bye\n")]
    assert docker.calls == ["stop", "stopped", "remove"]


async def test_an_exit_looked_at_after_the_clean_up_is_told_once(tmp_path: Path) -> None:
    docker, manager = CleaningDocker(), Manager()
    docker.cleaned.set()
    await actions(tmp_path, docker, manager).do(EXITED, None)
    assert manager.told() == [(SessionStatus.TERMINATED, "bye\n")]


async def test_a_stop_whose_end_cannot_be_told_leaves_the_container_for_the_next_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pause = asyncio.sleep

    async def short(seconds: float) -> None:  # do()'s pause before the next pass retries
        await pause(min(seconds, 0.01))

    monkeypatch.setattr(asyncio, "sleep", short)
    docker, manager = CleaningDocker(), Manager(fail=True)
    steps = actions(tmp_path, docker, manager)
    step = asyncio.create_task(steps.do(STOP, None))
    await until(lambda: docker.calls == ["stop"])
    steps.died(SID)
    await step  # the link error is for the next pass to retry, not raised
    assert "remove" not in docker.calls and SID not in steps.reported


class Requeueing(Manager):
    """A manager that queued the session again at its end (preempted): the logs that follow
    are for a session no longer on this node (404)."""

    async def report(self, session_id: str, report: StateReport) -> str:
        if report.logs is not None:
            raise LinkError(f"session {session_id} is not assigned to this node", status=404)
        return await super().report(session_id, report)


def _assignment(requeued: int, grace: int | None = 7) -> Any:
    from gpuslice.common.schemas.agents import Assignment

    return Assignment.model_validate({
        "session_id": SID, "name": "train", "owner": "alice", "image": "base", "type": "batch",
        "command": ["true"], "env": {}, "status": "SCHEDULED", "desired": "running",
        "resources": {"gpu": 0, "cpu": 1000, "mem": 2**30}, "slices": [],
        "stop_grace_s": grace, "requeued": requeued})


async def test_a_preempted_session_is_stopped_with_its_class_grace_and_starts_anew(
    tmp_path: Path,
) -> None:
    """Issue 32: the stop takes the session's grace (its class's), the logs of a session the
    manager queued again at its end are no one's news (no retry, its container removed), and
    once the session is placed here again (a higher ``requeued``) its earlier end no longer
    keeps its new start from happening."""
    graces: list[int] = []
    docker, manager = CleaningDocker(), Requeueing()

    async def stop_container(container_id: str, grace_s: int = 10) -> None:
        graces.append(grace_s)
        await docker.cleaned.wait()

    docker.stop_container = stop_container  # type: ignore[method-assign]
    steps = actions(tmp_path, docker, manager)
    steps.renew([_assignment(0)])
    step = asyncio.create_task(steps.do(STOP, _assignment(0)))
    await until(lambda: graces)
    steps.died(SID)  # told: the manager queues it again
    await until(lambda: manager.reports)
    docker.cleaned.set()
    await step
    assert graces == [7]
    assert docker.calls == ["remove"]  # the late logs' 404 did not stop the clean-up
    assert steps.reported[SID] is SessionStatus.TERMINATED
    steps.renew([_assignment(0)])  # the same start: its end stands
    assert steps.reported[SID] is SessionStatus.TERMINATED
    steps.renew([_assignment(1)])  # queued again and placed here: a new start
    assert SID not in steps.reported
