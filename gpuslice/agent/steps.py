"""The per-session step machine: which session takes a step, and when.

Each session's step (``sessions.py``: start, report, finish, stop, remove) runs as its own task,
at most one per session at a time. Steps start from a reconcile pass (desired vs actual state,
``decide.py``), from the assignments as they arrive (sessions just placed start, sessions the
manager wants stopped stop, without waiting for a listing), from a container's ``die`` event
(``finish_stopped``) and from the watchdog (``step``). A step's end asks for a pass (``kick``)
only when it leaves reconcile something to do: each pass lists the node's containers, work for
dockerd while it starts others.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Collection, Coroutine
from typing import Any

from gpuslice.agent.adoption import misplaced
from gpuslice.agent.decide import Act, Action, decide
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.isolation.sandboxes import Sandboxes
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    DockerUnavailable,
    RuntimeEvent,
)
from gpuslice.agent.runtime.spec import container_name
from gpuslice.agent.sessions import SessionActions
from gpuslice.agent.settings import AgentSettings
from gpuslice.agent.streams import StreamService
from gpuslice.common.docker_engine import explain
from gpuslice.common.schemas.agents import Assignment, Assignments
from gpuslice.common.schemas.sessions import SessionStatus

log = logging.getLogger("gpuslice.agent")
_ENDED = (SessionStatus.TERMINATED, SessionStatus.ERROR)
_REPORTED = (SessionStatus.PREPARING, SessionStatus.RUNNING, *_ENDED)  # the agent's own word


class Steps:
    """The node's sessions' steps. ``desired`` is the manager's last assignments, ``busy``
    each session's running step, ``kick`` is set when a reconcile pass is wanted.

    The steps' hands (``SessionActions``, the warm sandboxes) exist once Docker answers:
    ``use`` gives them before any step runs."""

    def __init__(self, settings: AgentSettings, runtime: DockerRuntime,
                 endpoint: SessionEndpoint, streams: StreamService) -> None:
        self.settings = settings
        self.runtime = runtime
        self.endpoint = endpoint
        self.streams = streams
        self.desired: Assignments | None = None
        self.kick = asyncio.Event()
        self.busy: dict[str, asyncio.Task[None]] = {}  # session id -> its running step
        # busy session -> its container that stopped meanwhile (and its name if cleanly)
        self._stopped: dict[str, tuple[str, str | None]] = {}
        self._stepped_on: dict[str, Assignment | None] = {}  # busy session -> its assignment
        self.sessions: SessionActions  # given by use()
        self.sandboxes: Sandboxes | None = None

    def use(self, sessions: SessionActions, sandboxes: Sandboxes | None) -> None:
        self.sessions = sessions
        self.sandboxes = sandboxes

    def take(self, desired: Assignments) -> None:
        """New assignments: the steps they call for at once, and a pass if they hold news."""
        before, self.desired = self.desired, desired
        self.sessions.renew(desired.sessions)
        self.start_placed(desired)
        self.stop_wanted(desired)
        if self._news(before, desired):
            self.kick.set()

    async def reconcile(self, desired: Assignments) -> None:
        """One pass: every session gets the one next step it needs, run as its own task."""
        wanted = {a.session_id: a for a in desired.sessions}
        listed_at = time.monotonic()
        try:  # busy sessions' stopped containers are their steps': not inspected
            containers = await self.runtime.list_managed(busy=set(self.busy))
        except DockerUnavailable as err:  # sessions to start wait for it, and say so
            problem = explain(err, self.settings.docker_url)
            for a in desired.sessions:
                if a.desired == "running" and a.status is SessionStatus.SCHEDULED:
                    await self.sessions.say_docker_away(a.session_id, problem)
            raise
        actual = {}
        for container in containers:
            if container.name == container_name(container.session_id):
                actual[container.session_id] = container
            elif container.owned:  # a second container claiming a session: only the named
                await self.runtime.remove_container(container.container_id)  # one may exist
        known = wanted.keys() | actual.keys()
        self.sessions.forget(keep=known)
        if self.sandboxes is not None:
            self.sandboxes.sweep(actual.keys() | self.busy.keys(), listed_at)
        self.streams.forget(keep={sid for sid, c in actual.items() if c.running})
        for session_id, assignment in wanted.items():
            running = actual.get(session_id)
            if assignment.apps and assignment.desired == "running" and running and running.running:
                self.streams.autostart(session_id, assignment.apps)
        # Sockets for every container (adopted ones too, after a restart) and starting session;
        # none for another agent's that this node's manager does not give it.
        served = {sid for sid, c in actual.items() if c.owned or sid in wanted}
        await self.endpoint.sync(served | self.busy.keys())
        for session_id in sorted(known):
            if session_id in self.busy:
                continue
            found = actual.get(session_id)
            wrong = (misplaced(found, self.runtime.files_root, self.settings.storage_root)
                     if found is not None and found.running else None)
            action = decide(wanted.get(session_id), found, session_id, wrong)
            if action is None or self.sessions.already_reported(action) or self._ended(action):
                continue
            self.step(session_id, self.sessions.do(action, wanted.get(session_id)))

    def start_placed(self, desired: Assignments) -> None:
        """Start the sessions just placed here at once, without waiting for a listing of the
        node's containers (dockerd answers listings slowly while it starts others, seconds
        on a busy node). Safe without the look: a start creates the container under the
        session's name first and adopts the one that exists (Docker's 409)."""
        for a in desired.sessions:
            sid = a.session_id
            if (a.status is SessionStatus.SCHEDULED and a.desired == "running"
                    and sid not in self.busy and sid not in self.sessions.reported):
                self.step(sid, self.sessions.do(Action(Act.START, sid), a))

    def stop_wanted(self, desired: Assignments) -> None:
        """Stop the sessions the manager wants stopped at once, without waiting for a listing
        (a session queued behind a full node waits on this stop). The stop goes by the
        container's name, which is the session's; a busy session's stop is reconcile's after
        its step (whose end kicks a pass)."""
        for a in desired.sessions:
            sid = a.session_id
            if (a.desired == "stopped" and sid not in self.busy
                    and self.sessions.reported.get(sid) not in _ENDED):
                stop = Action(Act.STOP, sid, SessionStatus.TERMINATED, reason="stopped")
                self.step(sid, self.sessions.do(stop, a))

    def finish_stopped(self, session_id: str, container_id: str, clean: str | None) -> None:
        """A container stopped by itself: take the session's step (report how it ended)
        without a listing of the node's containers. ``clean``: its name, when its ``die``
        event says it exited with code 0 (then nothing needs looking up; else it is
        inspected, for an OOM kill or a runtime error)."""
        if self.desired is None:
            return
        if session_id in self.busy:  # its step ends first (a batch that ended as it started)
            self._stopped[session_id] = (container_id, clean)
            return

        async def step() -> None:
            try:
                state = (ContainerState.exited_cleanly(container_id, clean, session_id)
                         if clean else await self.runtime.inspect(container_id))
            except ContainerRuntimeError as err:  # reconcile's next pass looks again
                log.warning("session %s: looking at its stopped container: %s", session_id, err)
                return
            if state is None or state.name != container_name(session_id):
                return  # gone already, or a stray duplicate (reconcile removes those)
            wanted = self.assignment(session_id)
            action = decide(wanted, state, session_id)
            if action is not None and action.act is Act.FINISH and not self._ended(action):
                await self.sessions.do(action, wanted)

        self.step(session_id, step())

    def step(self, session_id: str, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as the session's one step (reconcile leaves it alone meanwhile)."""
        task = asyncio.create_task(work)
        self.busy[session_id] = task
        self._stepped_on[session_id] = self.assignment(session_id)
        task.add_done_callback(functools.partial(self._done, session_id))

    def own_doing(self, event: RuntimeEvent) -> bool:
        """An event of what the agent did and told already: the start of a container it
        reported RUNNING, or the removal of one whose end it told (its step may be over by
        the time the event comes, on a busy node often). Nothing is left to do."""
        reported = self.sessions.reported.get(event.session_id)
        return ((event.kind == "start" and reported is SessionStatus.RUNNING)
                or (event.kind == "destroy" and reported in _ENDED))

    def assignment(self, session_id: str) -> Any:
        sessions = self.desired.sessions if self.desired is not None else []
        return next((a for a in sessions if a.session_id == session_id), None)

    def _news(self, before: Assignments | None, after: Assignments) -> bool:
        """Whether ``after`` holds anything for reconcile, beyond what this agent did or said
        itself: its own reports coming back as statuses, sessions it took a step for just now
        (``start_placed``, ``stop_wanted``: a busy session is looked at again when its step
        ends), sessions gone once it reported their end. Each pass lists the node's
        containers, work for dockerd while it starts others."""
        if before is None:
            return True
        old = {a.session_id: a for a in before.sessions}
        for a in after.sessions:
            was = old.pop(a.session_id, None)
            own = (self.sessions.reported.get(a.session_id),)
            if a.session_id not in self.busy and self._moved(was, a, own):
                return True
        return any(sid not in self.busy and self.sessions.reported.get(sid) not in _ENDED
                   for sid in old)

    def _moved(self, was: Assignment | None, now: Assignment | None,
               own: Collection[SessionStatus | None]) -> bool:
        """Whether a session's assignment changed from ``was`` to ``now`` by more than a
        status in ``own``: the agent's own reports coming back."""
        if was is None or now is None:
            return was is not now
        if now.model_copy(update={"status": was.status}) != was:
            return True
        return now.status is not was.status and now.status not in own

    def _ended(self, action: Action) -> bool:
        # Told the manager that it ended: a start from assignments older than that report
        # would run a batch twice, and a report ("its container is gone", once it is removed)
        # would change nothing there (an ended session stays as it ended) but cost a request.
        # Nor is a session stopped again once its end is told and its container gone: that end
        # is the agent's own word, no news, so the assignments still list it, stopped, until
        # something else changes (each pass would stop, report and remove it again).
        ended = self.sessions.reported.get(action.session_id) in _ENDED
        if action.act is Act.STOP:
            return ended and action.container_id is None
        return ended and action.act in (Act.START, Act.REPORT)

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        self.busy.pop(session_id, None)
        stepped_on = self._stepped_on.pop(session_id, None)
        if (stopped := self._stopped.pop(session_id, None)) is not None:
            self.finish_stopped(session_id, *stopped)
            if session_id in self.busy:
                return  # its next step; that one's end is looked at in turn
        if self._left_to_do(session_id, task, stepped_on):
            self.kick.set()

    def _left_to_do(self, session_id: str, task: asyncio.Task[None],
                    stepped_on: Assignment | None) -> bool:
        """Whether a step's end leaves reconcile something to do: the step failed (tried
        again), the session is not where a step leaves it (RUNNING, or its end told: a start
        waiting for its image, a report that did not go out), its apps are to start, or its
        assignment moved while the step ran (it was busy, so that answer took no step). A
        step that did what it set out to do needs no pass: each lists the node's containers,
        two or three per session (start, end, the removal's event) before."""
        if task.cancelled():
            return True
        if (failed := task.exception()) is not None:  # retrieved here: said here
            log.error("session %s: its step failed", session_id, exc_info=failed)
            return True
        now = self.assignment(session_id)
        reported = self.sessions.reported.get(session_id)
        if reported is not SessionStatus.RUNNING and reported not in _ENDED:
            return True
        if any(a is not None and a.apps for a in (now, stepped_on)):
            return True
        if now is None and reported in _ENDED:
            return False  # gone from the assignments once its end was told
        # Any status the agent reports may come back meanwhile, not only its last report.
        return self._moved(stepped_on, now, _REPORTED)
