"""The node agent: dial the manager, and keep this node's containers as the manager wants them.

Four supervised loops share one process: heartbeats (devices, capacity, usage up), assignments
(long-poll: desired state down, at once when it changes), Docker events (a container that stops
is noticed at once), and the GPU watchdog (nvidia only). Reconciliation runs whenever one of
them has news, one pass at a time; each session's work runs as its own task, at most one per
session. Nothing that matters is kept in memory: desired state is the manager's, actual state
is Docker's labels, so a restarted agent picks up where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

import aiodocker

from gpuslice.agent.accelerators import Accelerator, detect
from gpuslice.agent.config import AgentSettings
from gpuslice.agent.decide import Act, Action, decide
from gpuslice.agent.manager_link import Credential, LinkError, ManagerLink, NotRegistered
from gpuslice.agent.runtime.adapter import session_spec
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.hardcaps import apply_hard_caps
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    DockerUnavailable,
    ImageNotFound,
    ImagePullError,
)
from gpuslice.agent.runtime.spec import (
    SpecError,
    SpecOptions,
    build_container_spec,
    container_name,
)
from gpuslice.agent.usage import UsageCollector
from gpuslice.agent.watchdog import check as watchdog_check
from gpuslice.common.schemas.agents import (
    Assignment,
    Assignments,
    CommitRequest,
    CommitUpload,
    ExecRequest,
    ExecUpload,
    LogRequest,
    LogUpload,
    NodeRegister,
    StateReport,
)
from gpuslice.common.schemas.sessions import SessionStatus

log = logging.getLogger("gpuslice.agent")
LONG_POLL_S = 25.0
RECONCILE_SAFETY_S = 10.0
FINAL_LOG_LINES = 2000


class Agent:
    """One node's agent. ``await agent.run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        accelerator: Accelerator | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.say = say or log.info
        self.accelerator = accelerator
        self.runtime = DockerRuntime(node_name=settings.node_name, files_root=settings.data_dir,
                                     docker_url=settings.docker_url)
        self.link = ManagerLink(settings.manager_url, settings.data_dir)
        self.desired: Assignments | None = None
        self._kick = asyncio.Event()
        self._busy: dict[str, asyncio.Task[None]] = {}  # session id -> its running work
        self._answered: set[str] = set()  # log/exec/commit requests taken on, still listed
        self._reported: dict[str, SessionStatus] = {}  # last report per session (saves calls)
        self._heartbeat_now = asyncio.Event()  # the manager asked for images at once (rescan)
        self._rescan: int | None = None

    async def run(self, stop: asyncio.Event) -> None:
        if self.accelerator is None:
            found = detect(self.settings)
            self.accelerator = found.accelerator
            self.say(f"agent {self.settings.node_name}: {found.message}")
        self.usage = UsageCollector(self.settings, self.runtime, self.accelerator)
        try:
            await self._wait_for_docker(stop)
            credential = await self._connect(stop)
            self.say(
                f"agent {self.settings.node_name}: joined {self.link.manager_url} "
                f"as node {credential.node_id}"
            )
            loops = [
                self._supervise("heartbeat", self._heartbeat_loop, stop),
                self._supervise("assignments", self._assignment_loop, stop),
                self._supervise("docker events", self._event_loop, stop),
                self._supervise("reconcile", self._reconcile_loop, stop),
            ]
            if self.accelerator.name == "nvidia":
                loops.append(self._supervise("gpu watchdog", self._watchdog_loop, stop))
            tasks = [asyncio.create_task(loop) for loop in loops]
            await stop.wait()
            for task in [*tasks, *self._busy.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._busy.values(), return_exceptions=True)
        finally:
            await self.link.close()
            await self.runtime.close()
            self.accelerator.close()

    # ------------------------------------------------------------ start

    async def _wait_for_docker(self, stop: asyncio.Event) -> None:
        warned = False
        while not stop.is_set() and not await self.runtime.ping():
            if not warned:
                self.say(
                    "agent: waiting for the Docker Engine "
                    f"({self.settings.docker_url or 'the local socket'}) to answer"
                )
                warned = True
            await _sleep_or_stop(stop, 1.0)

    async def _connect(self, stop: asyncio.Event) -> Credential:
        register = None
        if self.settings.join_token is not None:
            fgpu = self.settings.fgpu_per_gpu
            register = NodeRegister(
                join_token=self.settings.join_token.get_secret_value(),
                name=self.settings.node_name,
                fgpu_per_gpu=None if fgpu is None else fgpu / 1000,
            )
        delay = 0.5
        while True:
            try:
                return await self.link.connect(register)
            except NotRegistered:
                raise
            except LinkError as err:
                if err.status in (400, 401, 403, 404, 422):
                    raise
                self.say(f"agent: manager not reachable yet ({err}); retrying")
                await _sleep_or_stop(stop, delay)
                delay = min(delay * 2, 10.0)

    # ------------------------------------------------------------ loops

    async def _supervise(
        self, name: str, body: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        """Run a loop forever: log a failure, back off with jitter, go on."""
        delay = 0.5
        while not stop.is_set():
            started = time.monotonic()
            try:
                await body(stop)
                return
            except asyncio.CancelledError:
                raise
            except (DockerUnavailable, LinkError) as err:
                log.warning("%s: %s", name, err)
            except Exception:
                log.exception("%s loop failed; restarting it", name)
            if time.monotonic() - started > 30:
                delay = 0.5
            await _sleep_or_stop(stop, delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, 15.0)

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            body = await self.usage.heartbeat()
            await self.runtime.prune_files(keep=set(self._busy))
            try:
                await self.link.heartbeat(body)
            except LinkError as err:
                if err.status == 401:
                    await self._reregister()
                raise
            interval = self.link.credential.heartbeat_interval if self.link.credential else 5.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            self._heartbeat_now.clear()

    async def _assignment_loop(self, stop: asyncio.Event) -> None:
        version = None
        while not stop.is_set():
            desired = await self.link.assignments(version, LONG_POLL_S)
            version = desired.version
            self.desired = desired
            self._kick.set()
            # the manager lists a request until it is answered: forget the ones it no longer does
            self._answered &= {r.id for r in (*desired.log_requests, *desired.exec_requests,
                                              *desired.commit_requests)}
            for request in desired.log_requests:
                self._answer(request.id, self._upload_logs(request))
            for request in desired.exec_requests:
                self._answer(request.id, self._run_exec(request))
            for commit in desired.commit_requests:
                self._answer(commit.id, self._commit(commit))
            if self._rescan is not None and desired.rescan != self._rescan:
                self._heartbeat_now.set()
            self._rescan = desired.rescan
            if desired.remove_images:
                await self._remove_images(desired.remove_images)

    async def _event_loop(self, stop: asyncio.Event) -> None:
        async for event in self.runtime.events():
            if event.kind == "disconnected":
                self.say(f"agent: lost the Docker Engine ({event.detail}); reconnecting")
            elif event.kind == "connected":
                log.info("docker events: connected")
            self._kick.set()
            if stop.is_set():
                return

    async def _reconcile_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), RECONCILE_SAFETY_S)
            self._kick.clear()
            if self.desired is not None:
                await self.reconcile(self.desired)

    async def _watchdog_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            usage = await asyncio.to_thread(self.accelerator.usage)
            containers = [c for c in await self.runtime.list_managed() if c.running]
            for overuse in watchdog_check(usage, containers,
                                          tolerance=self.settings.watchdog_tolerance):
                self.say(f"agent: session {overuse.session_id}: {overuse.detail()}")
                await self.runtime.stop(overuse.session_id, self.settings.stop_grace_s)
                await self._report(
                    overuse.session_id,
                    StateReport(status=SessionStatus.ERROR, reason=overuse.reason()),
                )
            await _sleep_or_stop(stop, 2.0)

    # ------------------------------------------------------------ reconcile

    async def reconcile(self, desired: Assignments) -> None:
        """One pass: every session gets the one next step it needs, run as its own task."""
        wanted = {a.session_id: a for a in desired.sessions}
        actual = {}
        for container in await self.runtime.list_managed():
            if container.name == container_name(container.session_id):
                actual[container.session_id] = container
            else:  # a second container claiming a session: only the named one may exist
                await self.runtime.remove_container(container.container_id)
        known = wanted.keys() | actual.keys()
        for gone in self._reported.keys() - known:  # ended and removed: nothing left to say
            del self._reported[gone]
        for session_id in sorted(known):
            if session_id in self._busy:
                continue
            action = decide(wanted.get(session_id), actual.get(session_id), session_id)
            if action is None or self._already_reported(action):
                continue
            task = asyncio.create_task(self._do(action, wanted.get(session_id)))
            self._busy[session_id] = task
            task.add_done_callback(lambda _t, sid=session_id: self._done(sid))

    def _done(self, session_id: str) -> None:
        self._busy.pop(session_id, None)
        self._kick.set()  # the step may have a follow-up (e.g. RUNNING after PREPARING)

    def _already_reported(self, action: Action) -> bool:
        return action.act is Act.REPORT and self._reported.get(action.session_id) == action.status

    async def _do(self, action: Action, assignment: Assignment | None) -> None:
        sid = action.session_id
        try:
            if action.act is Act.START and assignment is not None:
                await self._start(assignment)
            elif action.act is Act.REPORT:
                await self._report(sid, StateReport(status=action.status, reason=action.reason))
            elif action.act is Act.FINISH:
                logs = await self._final_logs(sid)
                await self._report(
                    sid,
                    StateReport(
                        status=action.status,
                        exit_code=action.exit_code,
                        reason=action.reason,
                        logs=logs,
                    ),
                )
                await self.runtime.remove(sid)
            elif action.act is Act.STOP:
                await self.runtime.stop(sid, self.settings.stop_grace_s)
                logs = await self._final_logs(sid)
                await self.runtime.remove(sid)
                await self._report(
                    sid, StateReport(status=SessionStatus.TERMINATED, reason="stopped", logs=logs)
                )
            elif action.act is Act.REMOVE:
                self.say(
                    f"agent: removing the container of session {sid} "
                    "(the manager no longer lists it)"
                )
                await self.runtime.stop(sid, self.settings.stop_grace_s)
                await self.runtime.remove(sid)
        except (DockerUnavailable, LinkError) as err:
            log.warning("session %s: %s: %s (will retry)", sid, action.act.value, err)
            await asyncio.sleep(1.0)

    async def _start(self, assignment: Assignment) -> None:
        sid = assignment.session_id
        preparing = None
        if assignment.status is SessionStatus.SCHEDULED:
            # told while the container is being made: the report's round trip costs no start time
            preparing = asyncio.create_task(self._report(sid, StateReport(
                status=SessionStatus.PREPARING,
                reason=f"creating its container on {self.settings.node_name}",
            )))
        failure = ""
        try:
            if assignment.pull and not await self.runtime.has_image(assignment.image):
                if preparing is not None:  # PREPARING first, then the pull's progress
                    await preparing
                    preparing = None
                await self._pull(assignment)
            spec = build_container_spec(session_spec(assignment), self._spec_options())
            spec = apply_hard_caps(spec, self.settings.hard_caps)
            running = (await self.runtime.ensure_running(spec)).running
        except ImageNotFound:
            failure = f"image {assignment.image} is not on node {self.settings.node_name}"
        except ImagePullError as err:
            failure = f"could not pull {assignment.image}: {err}"
        except DockerUnavailable:
            if preparing is not None:
                await asyncio.gather(preparing, return_exceptions=True)
            raise
        except (SpecError, ContainerRuntimeError) as err:
            failure = f"could not start: {err}"
        if preparing is not None:
            await preparing  # PREPARING is recorded before any later report
        if failure:
            await self._report(sid, StateReport(status=SessionStatus.ERROR, reason=failure))
        elif running:
            await self._report(sid, StateReport(status=SessionStatus.RUNNING, reason="running"))

    async def _pull(self, assignment: Assignment) -> None:
        """Pull the session's image (in the registry, not on this node yet), its progress
        shown as the PREPARING reason."""
        sid, image = assignment.session_id, assignment.image

        async def progress(percent: int) -> None:
            with contextlib.suppress(LinkError):  # a lost report must not stop the pull
                await self._report(sid, StateReport(
                    status=SessionStatus.PREPARING, reason=f"pulling {image}: {percent}%"
                ))

        self.say(f"agent: pulling {image} for session {sid}")
        await self.runtime.pull(image, progress)

    async def _report(self, session_id: str, report: StateReport) -> None:
        await self.link.report(session_id, report)
        self._reported[session_id] = report.status

    async def _final_logs(self, session_id: str) -> str | None:
        try:
            return (await self.runtime.logs(session_id, tail=FINAL_LOG_LINES))[-1024 * 1024 :]
        except ContainerRuntimeError:
            return None

    # ------------------------------------------------------------ requests

    def _answer(self, request_id: str, work: Awaitable[None]) -> None:
        if request_id in self._answered:
            work.close()  # type: ignore[attr-defined]
            return
        self._answered.add(request_id)
        asyncio.create_task(work)

    async def _upload_logs(self, request: LogRequest) -> None:
        try:
            text = await self.runtime.logs(request.session_id, tail=request.tail)
            body = LogUpload(logs=text[-4 * 1024 * 1024 :], truncated=len(text) > 4 * 1024 * 1024)
        except ContainerRuntimeError as err:
            body = LogUpload(logs=f"(no logs: {err})\n")
        try:
            await self.link.upload_logs(request.id, body)
        except LinkError as err:
            log.warning("log upload for %s failed: %s", request.session_id, err)

    async def _run_exec(self, request: ExecRequest) -> None:
        try:
            result = await self.runtime.exec(
                request.session_id, request.command, timeout=request.timeout
            )
            body = ExecUpload(
                exit_code=result.exit_code,
                stdout=result.stdout[-4 * 1024 * 1024 :],
                stderr=result.stderr[-4 * 1024 * 1024 :],
            )
        except TimeoutError:
            body = ExecUpload(exit_code=-1, error=f"timed out after {request.timeout:g}s")
        except ContainerRuntimeError as err:
            body = ExecUpload(exit_code=-1, error=f"could not run: {err}")
        try:
            await self.link.upload_exec(request.id, body)
        except LinkError as err:
            log.warning("exec answer for %s failed: %s", request.session_id, err)

    async def _commit(self, request: CommitRequest) -> None:
        try:
            info = await self.runtime.commit(
                request.session_id, request.reference, request.labels
            )
            body = CommitUpload(image_id=info.image_id, size=info.size, labels=info.labels)
            self.say(f"agent: session {request.session_id} committed as {info.tag}")
            self._heartbeat_now.set()  # the catalog learns the image's presence at once
        except ContainerRuntimeError as err:
            body = CommitUpload(error=f"could not commit: {err}")
        except aiodocker.DockerError as err:
            body = CommitUpload(error=f"could not commit: {err.message}")
        try:
            await self.link.upload_commit(request.id, body)
        except LinkError as err:
            log.warning("commit answer for %s failed: %s", request.session_id, err)

    async def _remove_images(self, references: list[str]) -> None:
        # Docker refuses to delete an image a container uses (409): it is tried again with
        # the next assignments, which list it until a heartbeat no longer reports it.
        removed = [ref for ref in references if await self.runtime.remove_image(ref)]
        if removed:
            self.say(f"agent: removed image(s) {', '.join(removed)} (gone from the catalog)")
            self._heartbeat_now.set()

    # ------------------------------------------------------------ helpers

    async def _reregister(self) -> None:
        self.say("agent: the manager no longer accepts this node's credential")
        self.link.forget()
        await self._connect(asyncio.Event())

    def _spec_options(self) -> SpecOptions:
        return SpecOptions(
            node_name=self.settings.node_name,
            accelerator=self.accelerator.name,
            device_requests=self.accelerator.device_requests,
            user=self.settings.session_user,
            pids_limit=self.settings.pids_limit,
        )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


__all__ = ["Agent"]
