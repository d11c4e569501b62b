"""The steps the agent takes for one session: start, report, finish, stop, remove.

:func:`gpuslice.agent.decide.decide` picks the one next step from desired and actual state;
:class:`SessionActions` carries it out against Docker and tells the manager. The agent runs at
most one step per session at a time (``steps.py``), so these never race each other for
the same session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from pathlib import Path

from gpuslice.agent.decide import Act, Action
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.isolation.sandboxes import Sandboxes
from gpuslice.agent.manager_link import LinkError, ManagerLink
from gpuslice.agent.runtime.adapter import session_spec
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.folders import folder_mounts
from gpuslice.agent.runtime.hardcaps import apply_hard_caps
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    DockerUnavailable,
    ImageNotFound,
    ImagePullError,
)
from gpuslice.agent.runtime.sandbox_ops import SandboxUnusable
from gpuslice.agent.runtime.spec import (
    ContainerSpec,
    SpecError,
    SpecOptions,
    build_container_spec,
    container_name,
)
from gpuslice.agent.settings import AgentSettings
from gpuslice.common.docker_engine import explain
from gpuslice.common.logs import bind
from gpuslice.common.schemas.agents import Assignment, StateReport
from gpuslice.common.schemas.sessions import SessionStatus

log = logging.getLogger("gpuslice.agent")
FINAL_LOG_LINES = 2000
FINAL_LOG_CAP = 1024 * 1024  # characters of the final logs sent with the last report
_IMAGE_RETRY_S = 2.0  # between looks for a session's missing image


class SessionActions:
    """One session's next step, against Docker and the manager. ``reported`` keeps the last
    status told per session, so an unchanged state is not reported again (it saves calls)."""

    def __init__(
        self,
        settings: AgentSettings,
        runtime: DockerRuntime,
        link: ManagerLink,
        options: SpecOptions,
        say: Callable[[str], None],
        endpoint: SessionEndpoint | None = None,
        shim: Path | None = None,
        sandboxes: Sandboxes | None = None,
    ) -> None:
        """``shim``: the cap shim on this node (``capshim.build``), given when hard caps are
        on (``hard_caps.mode``); ``sandboxes``: the node's warm network sandboxes, when
        sessions are fenced and some are kept (``network.warm_sandboxes``)."""
        self.shim = shim
        self.sandboxes = sandboxes
        self.settings = settings
        self.runtime = runtime
        self.link = link
        self.options = options
        self.say = say
        self.endpoint = endpoint
        self.reported: dict[str, SessionStatus] = {}
        # the highest ``Assignment.requeued`` seen per session: a higher one is a new start
        self._requeued: dict[str, int] = {}
        # sessions whose image is missing: when they began to wait for it (monotonic seconds)
        self._image_missing_since: dict[str, float] = {}
        self._docker_away: set[str] = set()  # told that they wait for the Docker Engine
        # sessions being stopped: done when Docker says their container died (``died``)
        self._dying: dict[str, asyncio.Future[None]] = {}

    async def do(self, action: Action, assignment: Assignment | None) -> None:
        """Carry out ``action``; Docker or the manager being away is retried by the next pass."""
        sid = action.session_id
        bind(session_id=sid)  # this step runs as its own task: its log lines name the session
        try:
            if action.act is Act.START and assignment is not None:
                await self.start(assignment)
            elif action.act is Act.REPORT:
                await self.report(sid, StateReport(status=action.status, reason=action.reason))
            elif action.act is Act.FINISH:
                await self._finish(action)
            elif action.act is Act.STOP:
                await self._stop(sid, action.status or SessionStatus.TERMINATED, action.reason,
                                 action.container_id, self._grace(assignment))
            elif action.act is Act.REMOVE:
                await self._remove(sid, action.container_id)
            elif action.act is Act.RECREATE and assignment is not None:
                await self._recreate(action, assignment)
        except (DockerUnavailable, LinkError) as err:
            log.warning("session %s: %s: %s (will retry)", sid, action.act.value, err)
            await asyncio.sleep(1.0)

    def already_reported(self, action: Action) -> bool:
        return action.act is Act.REPORT and self.reported.get(action.session_id) == action.status

    def renew(self, assignments: Iterable[Assignment]) -> None:
        """Sessions preempted and queued again, placed anew: the end told of their earlier
        start is not theirs now (else it would stop the new start)."""
        for a in assignments:
            seen = self._requeued.get(a.session_id)
            if seen is not None and a.requeued > seen:
                self.reported.pop(a.session_id, None)
            self._requeued[a.session_id] = max(a.requeued, seen or 0)

    def forget(self, keep: Collection[str]) -> None:
        """Drop the last reports of sessions ended and removed: nothing is left to say."""
        for gone in self.reported.keys() - set(keep):
            del self.reported[gone]
        for gone in self._requeued.keys() - set(keep):
            del self._requeued[gone]
        for gone in self._image_missing_since.keys() - set(keep):
            del self._image_missing_since[gone]
        self._docker_away &= set(keep)

    async def report(self, session_id: str, report: StateReport) -> None:
        await self.link.report(session_id, report)
        self.reported[session_id] = report.status

    async def start(self, assignment: Assignment, restart: str | None = None) -> None:
        """Create and start the session's container (pulling its image if told to): PREPARING,
        then RUNNING, or ERROR with the reason. ``restart``: the container of a RUNNING
        session is made again, for this reason (told as a restart)."""
        sid = assignment.session_id
        preparing = None
        if assignment.status is SessionStatus.SCHEDULED:
            # told while the container is being made: the report's round trip costs no start time
            preparing = asyncio.create_task(self.report(sid, StateReport(
                status=SessionStatus.PREPARING,
                reason=f"creating its container on {self.settings.node_name}",
            )))
        failure, running = "", False
        try:
            if assignment.pull and not await self.runtime.has_image(assignment.image):
                if preparing is not None:  # PREPARING first, then the pull's progress
                    await preparing
                    preparing = None
                await self._pull(assignment)
            folders = folder_mounts(self.settings.storage_root, assignment.mounts)
            spec = build_container_spec(session_spec(assignment, folders), self.options)
            if self.shim is not None:
                spec = apply_hard_caps(spec, self.settings.hard_caps, self.shim)
            if self.endpoint is not None:  # its socket is there before the session starts
                await self.endpoint.open(sid)
            running = (await self._ensure_running(spec)).running
            self._image_missing_since.pop(sid, None)
            self._docker_away.discard(sid)
        except ImageNotFound:
            if preparing is not None:  # its reason first, then why it waits
                await preparing
                preparing = None
            failure = await self._wait_for_image(assignment)
        except ImagePullError as err:
            failure = f"could not pull {assignment.image}: {err}"
        except DockerUnavailable as err:
            if preparing is not None:
                await asyncio.gather(preparing, return_exceptions=True)
            await self.say_docker_away(sid, explain(err, self.settings.docker_url))
            raise
        except (SpecError, ContainerRuntimeError) as err:
            failure = f"could not start: {err}"
        if preparing is not None:
            await preparing  # PREPARING is recorded before any later report
        if failure:
            await self.report(sid, StateReport(status=SessionStatus.ERROR, reason=failure))
        elif running:
            await self.report(sid, StateReport(status=SessionStatus.RUNNING,
                                               reason=restart or "running",
                                               restarted=restart is not None))

    # ------------------------------------------------------------ helpers

    async def _ensure_running(self, spec: ContainerSpec) -> ContainerState:
        """The session's container, in a warm network sandbox when one is ready
        (``isolation/sandboxes.py``), else wired into the session network by Docker."""
        pool = self.sandboxes
        sandbox = pool.take(spec.session_id, spec.owner, spec.image) if pool else None
        if pool is None or sandbox is None:
            return await self.runtime.ensure_running(spec)
        try:
            state = await self.runtime.ensure_running(
                replace(spec, network=f"container:{sandbox}"))
        except SandboxUnusable as err:  # it stopped meanwhile: the direct way
            log.warning("session %s: network sandbox %s: %s", spec.session_id, sandbox[:12], err)
            pool.unusable(spec.session_id)
            return await self.runtime.ensure_running(spec)
        except BaseException:
            pool.joined(spec.session_id, None)  # it may be in it: its until removed
            raise
        pool.joined(spec.session_id, state.sandbox)
        return state

    async def say_docker_away(self, sid: str, detail: str) -> None:
        """Once per wait: the session's reason says that it waits for the Docker Engine (it
        starts by itself when the engine answers; the next reconcile passes try again)."""
        if sid in self._docker_away:
            return
        self._docker_away.add(sid)
        with contextlib.suppress(LinkError):
            await self.report(sid, StateReport(
                status=SessionStatus.PREPARING,
                reason=f"waiting for the Docker Engine on {self.settings.node_name}: "
                f"{detail}"[:500],
            ))

    async def _wait_for_image(self, assignment: Assignment) -> str:
        """The session's image is not on this node (deleted, or being rebuilt): it waits,
        PREPARING with that reason, up to ``image_wait_s``; then the failure to report."""
        sid, image, node = assignment.session_id, assignment.image, self.settings.node_name
        now = time.monotonic()
        since = self._image_missing_since.setdefault(sid, now)
        if now - since >= self.settings.image_wait_s:
            del self._image_missing_since[sid]
            return (f"image {image} is not on node {node} (waited "
                    f"{self.settings.image_wait_s} s for it): build or pull it there, then "
                    "create the session again")
        if since == now:  # the first time: say why it waits (the retries stay quiet)
            self.say(f"agent: session {sid} waits for image {image}, which is not on this node")
            with contextlib.suppress(LinkError):
                await self.report(sid, StateReport(
                    status=SessionStatus.PREPARING,
                    reason=f"waiting for image {image}, which is not on node {node} "
                    "(deleted? it starts once the image is back)",
                ))
        await asyncio.sleep(_IMAGE_RETRY_S)  # this session's next try comes no sooner
        return ""

    async def _finish(self, action: Action) -> None:
        """The container stopped by itself: report how (with its last logs), then remove it."""
        sid, cid = action.session_id, action.container_id
        # Told once dockerd has cleaned the container up (its logs are read only then): told
        # at the ``die`` event instead, with the logs after, the end costs a second report
        # and the next start runs beside the clean-up; on a busy node that is slower overall.
        end = StateReport(status=action.status, exit_code=action.exit_code, reason=action.reason)
        await self._end(sid, cid, end, told=False)
        await self._remove_container(sid, cid)

    def died(self, session_id: str) -> None:
        """Docker says the session's container died (its ``die`` event)."""
        if (dying := self._dying.get(session_id)) is not None and not dying.done():
            dying.set_result(None)

    def _grace(self, assignment: Assignment | None) -> int:
        """Seconds between SIGTERM and SIGKILL: the session's class's, else this node's."""
        if assignment is not None and assignment.stop_grace_s is not None:
            return assignment.stop_grace_s
        return self.settings.stop_grace_s

    async def _stop(
        self, sid: str, status: SessionStatus, reason: str, cid: str | None = None,
        grace_s: int | None = None,
    ) -> None:
        """Stop the container, keep its last logs, remove it, and report ``status`` with
        ``reason``: TERMINATED "stopped" when the manager asked, or the agent's own reason
        (the watchdog's ERROR), not how the process exited. ``cid``: its container, when
        reconcile just saw it; else its name, which is the session's (no look-up: each is a
        listing dockerd must answer; a missing container is no error on any of the calls).

        The end is told when the container's processes are gone (its ``die`` event, or the
        stop's return, whichever comes first), so the next session in the queue waits neither
        for dockerd's clean-up of the container nor for its removal. This step is the
        session's one until it ends, so reconcile cannot see the stopped container meanwhile
        and report it as having exited by itself."""
        cid = cid or container_name(sid)
        self._dying[sid] = died = asyncio.get_running_loop().create_future()
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        stopping = asyncio.create_task(self.runtime.stop_container(cid, grace))
        try:
            await asyncio.wait((stopping, died), return_when=asyncio.FIRST_COMPLETED)
            if stopping.done():
                stopping.result()  # its error, if it failed
            end, told = StateReport(status=status, reason=reason), not stopping.done()
            if told:  # it died; dockerd still cleans the container up
                await self.report(sid, end)
            await stopping
            await self._end(sid, cid, end, told=told)
        finally:
            del self._dying[sid]
            if not stopping.done():  # the step failed or was cancelled: the stop goes too
                stopping.cancel()
            elif not stopping.cancelled():
                stopping.exception()  # seen (raised above, when there was one)
        await self._remove_container(sid, cid)

    async def _end(self, sid: str, cid: str | None, end: StateReport, *, told: bool) -> None:
        """Report ``end`` with the container's last logs; ``told``: the end itself was reported
        already (at its death), so the logs go in a report of their own."""
        logs = await self._final_logs(sid, cid)
        if not told:
            await self.report(sid, end.model_copy(update={"logs": logs}))
        elif logs is not None:
            try:
                await self.link.report(sid, end.model_copy(update={"logs": logs}))
            except LinkError as err:
                if err.status != 404:
                    raise
                # the session left this node at its end: preempted, it is back in the
                # manager's queue, and this container's last output is no longer its news

    async def _recreate(self, action: Action, assignment: Assignment) -> None:
        """An adopted container with another agent's mounts (``adoption.py``): stopped,
        removed and made again with this node's, then the restart and its reason told (a
        line in the session's status history; its status stays RUNNING). A start that fails
        ends the session ERROR with why, as any start."""
        sid = action.session_id
        self.say(f"agent: session {sid} {action.reason}; recreating its container")
        # Stopped without its end told: the session goes on in the new container.
        await self.runtime.stop_container(action.container_id or container_name(sid),
                                          self.settings.stop_grace_s)
        await self._remove_container(sid, action.container_id)
        await self.start(assignment, restart=action.reason)

    async def _remove(self, sid: str, cid: str | None) -> None:
        self.say(
            f"agent: removing the container of session {sid} (the manager no longer lists it)"
        )
        if cid is None:
            await self.runtime.stop(sid, self.settings.stop_grace_s)
        else:
            await self.runtime.stop_container(cid, self.settings.stop_grace_s)
        await self._remove_container(sid, cid)

    async def _remove_container(self, sid: str, cid: str | None) -> None:
        """Remove the session's container and close its in-session endpoint's socket (a
        reconcile pass would close it too, but a step that ended as it should is followed by
        none)."""
        await self.runtime.remove(sid, cid)
        if self.sandboxes is not None:  # its container is gone: its sandbox is free
            self.sandboxes.release(sid)
        if self.endpoint is not None:
            await self.endpoint.close(sid)

    async def _pull(self, assignment: Assignment) -> None:
        """Pull the session's image (in the registry, not on this node yet), its progress
        shown as the PREPARING reason."""
        sid, image = assignment.session_id, assignment.image

        async def progress(percent: int) -> None:
            with contextlib.suppress(LinkError):  # a lost report must not stop the pull
                await self.report(sid, StateReport(
                    status=SessionStatus.PREPARING, reason=f"pulling {image}: {percent}%"
                ))

        self.say(f"agent: pulling {image} for session {sid}")
        await self.runtime.pull(image, progress)

    async def _final_logs(self, session_id: str, cid: str | None = None) -> str | None:
        try:
            logs = await self.runtime.logs(session_id, tail=FINAL_LOG_LINES, container_id=cid)
            return logs[-FINAL_LOG_CAP:]
        except ContainerRuntimeError:
            return None
