"""The node agent: dial the manager, and keep this node's containers as the manager wants them.

Four supervised loops share one process: heartbeats (devices, capacity, usage up), assignments
(long-poll: desired state down, at once when it changes), Docker events (a container that stops
is noticed at once), and the GPU watchdog (nvidia only). Reconciliation runs whenever one of
them has news, one pass at a time; each session's step (``sessions.py``) runs as its own task,
at most one per session. Requests that come with the assignments (logs, exec, commit) are
served by ``requests.py``; each session container gets its own in-session endpoint socket
(``endpoint.py``). Nothing that matters is kept in memory: desired state is the manager's,
actual state is Docker's labels, so a restarted agent picks up where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpuslice.agent.accelerators import Accelerator, detect
from gpuslice.agent.config import AgentSettings
from gpuslice.agent.decide import decide
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.manager_link import (
    Credential,
    LinkError,
    ManagerLink,
    NotRegistered,
    VersionMismatch,
    registration,
)
from gpuslice.agent.requests import RequestContext, RequestRunner
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import DockerUnavailable
from gpuslice.agent.runtime.spec import DeviceInfo, SpecOptions, container_name
from gpuslice.agent.sessions import SessionActions
from gpuslice.agent.usage import UsageCollector
from gpuslice.agent.watchdog import check as watchdog_check
from gpuslice.common.docker_engine import explain
from gpuslice.common.schemas.agents import Assignments, StateReport
from gpuslice.common.schemas.sessions import SessionStatus

log = logging.getLogger("gpuslice.agent")
LONG_POLL_S = 25.0
RECONCILE_SAFETY_S = 10.0
DEFAULT_HEARTBEAT_MS = 5000


class Agent:
    """One node's agent. ``await agent.run(stop)`` until ``stop`` is set.

    ``accelerator`` and ``link`` default to the detected one and a link to
    ``settings.manager_url``.
    """

    def __init__(
        self,
        settings: AgentSettings,
        *,
        accelerator: Accelerator | None = None,
        link: ManagerLink | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.say = say or log.info
        self.accelerator = accelerator
        self.runtime = DockerRuntime(node_name=settings.node_name, files_root=settings.data_dir,
                                     docker_url=settings.docker_url)
        self.link = link or ManagerLink(settings.manager_url, settings.data_dir)
        self.desired: Assignments | None = None
        self._kick = asyncio.Event()
        self._busy: dict[str, asyncio.Task[None]] = {}  # session id -> its running work
        self._heartbeat_now = asyncio.Event()  # images changed, or the manager asked (rescan)
        self._rescan: int | None = None
        self.ready = asyncio.Event()  # joined, and the manager has its first heartbeat
        self._manager_away: str | None = None  # said that the manager is unreachable: why
        self.usage_collector: UsageCollector | None = None  # made once the accelerator is known
        self.endpoint = SessionEndpoint(
            settings.data_dir, data=self, link=self.link, user=settings.session_user
        )
        self.requests = RequestRunner(RequestContext(
            runtime=self.runtime, link=self.link, say=self.say,
            images_changed=self._heartbeat_now.set,
        ))

    async def run(self, stop: asyncio.Event) -> None:
        if self.accelerator is None:
            found = detect(self.settings)
            self.accelerator = found.accelerator
            self.say(f"agent {self.settings.node_name}: {found.message}")
        accelerator = self.accelerator
        self.usage_collector = UsageCollector(self.settings, self.runtime, accelerator)
        self.sessions = SessionActions(
            self.settings, self.runtime, self.link, self._spec_options(accelerator), self.say,
            endpoint=self.endpoint,
        )
        try:
            await self._wait_for_docker(stop)
            credential = await self._connect(stop)
            # The manager knows the node's capacity before anyone is told it joined: a session
            # asked for at once must not be refused as fitting no node.
            if not await self._first_beat(stop):
                return
            self.say(
                f"agent {self.settings.node_name}: joined {self.link.manager_url} "
                f"as node {credential.node_id}"
            )
            self.ready.set()
            loops = [
                self._supervise("heartbeat", self._heartbeat_loop, stop),
                self._supervise("assignments", self._assignment_loop, stop),
                self._supervise("docker events", self._event_loop, stop),
                self._supervise("reconcile", self._reconcile_loop, stop),
            ]
            if accelerator.name == "nvidia":
                watchdog = functools.partial(self._watchdog_loop, accelerator)
                loops.append(self._supervise("gpu watchdog", watchdog, stop))
            tasks = [asyncio.create_task(loop) for loop in loops]
            await stop.wait()
            for task in [*tasks, *self._busy.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._busy.values(), return_exceptions=True)
            await self.requests.close()
        finally:
            await self.endpoint.stop()
            await self.link.close()
            await self.runtime.close()
            accelerator.close()

    # ------------------------------------------------------------ start

    async def _wait_for_docker(self, stop: asyncio.Event) -> None:
        said = None
        while not stop.is_set() and (problem := await self.runtime.problem()) is not None:
            if problem != said:  # say it once, and again only if the cause changes
                self.say(f"agent: {problem}; waiting for it")
                said = problem
            await _sleep_or_stop(stop, 1.0)
        if said is not None and not stop.is_set():
            self.say("agent: the Docker Engine answers")

    async def _connect(self, stop: asyncio.Event) -> Credential:
        register = registration(self.settings)
        delay = 0.5
        while True:
            try:
                return await self.link.connect(register)
            except (NotRegistered, VersionMismatch):
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
        """Run a loop forever: log a failure, back off with jitter, go on. The manager or
        Docker being away is logged once per cause (the agent says so besides)."""
        delay = 0.5
        last = ""
        while not stop.is_set():
            started = time.monotonic()
            try:
                await body(stop)
                return
            except asyncio.CancelledError:
                raise
            except (DockerUnavailable, LinkError) as err:
                log.log(logging.DEBUG if str(err) == last else logging.WARNING, "%s: %s",
                        name, err)
                last = str(err)
            except Exception:
                log.exception("%s loop failed; restarting it", name)
            if time.monotonic() - started > 30:
                delay = 0.5
            await _sleep_or_stop(stop, delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, 15.0)

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._beat()
            credential = self.link.credential
            interval_ms = credential.heartbeat_interval_ms if credential else DEFAULT_HEARTBEAT_MS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_ms / 1000)
            self._heartbeat_now.clear()

    async def _first_beat(self, stop: asyncio.Event) -> bool:
        """Heartbeat until the manager takes one (a stored credential needs no call to
        "connect", so this is the first word with the manager); ``False`` if stopped first."""
        delay, said = 0.5, ""
        while not stop.is_set():
            try:
                await self._beat()
                return True
            except LinkError as err:
                if err.status in (401, 403) or isinstance(err, VersionMismatch):
                    raise
                if str(err) != said:  # once per cause, not once per retry
                    self.say(f"agent: manager not reachable yet ({err}); retrying")
                    said = str(err)
            await _sleep_or_stop(stop, delay)
            delay = min(delay * 2, 10.0)
        return False

    async def _beat(self) -> None:
        """One heartbeat: what the node has and runs."""
        collector = self.usage_collector
        assert collector is not None, "run() makes the collector before any heartbeat"
        try:
            body = await collector.heartbeat()
            await self.runtime.prune_files(keep=set(self._busy))
        except DockerUnavailable as err:
            # Still a heartbeat: the node stays ALIVE while Docker is away, so that sessions
            # a live-restore engine keeps running are not called lost meanwhile.
            body = collector.without_engine(explain(err, self.settings.docker_url))
        try:
            await self.link.heartbeat(body)
        except LinkError as err:
            if err.status == 401:
                await self._reregister()
            elif err.status == 0 and self._manager_away is None:
                self.say(f"agent: lost the manager ({err}); sessions run on, retrying")
                self._manager_away = str(err)
            raise
        if self._manager_away is not None:
            self.say("agent: the manager answers again")
            self._manager_away = None

    async def _assignment_loop(self, stop: asyncio.Event) -> None:
        version = None
        while not stop.is_set():
            desired = await self.link.assignments(version, LONG_POLL_S)
            version = desired.version
            self.desired = desired
            self._kick.set()
            self.requests.take(desired.requests)  # each delivered in this answer only
            if self._rescan is not None and desired.rescan != self._rescan:
                self._heartbeat_now.set()
            self._rescan = desired.rescan
            if desired.remove_images:
                await self._remove_images(desired.remove_images)

    async def _event_loop(self, stop: asyncio.Event) -> None:
        lost = False
        async for event in self.runtime.events():
            if event.kind == "disconnected":
                self.say(f"agent: lost the Docker Engine ({event.detail}); sessions wait for "
                         "it, reconnecting")
                lost = True
            elif event.kind == "connected":
                if lost:
                    self.say("agent: the Docker Engine is back; re-adopting its containers")
                lost = False
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

    async def _watchdog_loop(self, accelerator: Accelerator, stop: asyncio.Event) -> None:
        while not stop.is_set():
            usage = await asyncio.to_thread(accelerator.usage)
            containers = [c for c in await self.runtime.list_managed() if c.running]
            for overuse in watchdog_check(usage, containers,
                                          tolerance=self.settings.watchdog_tolerance):
                self.say(f"agent: session {overuse.session_id}: {overuse.detail}")
                await self.runtime.stop(overuse.session_id, self.settings.stop_grace_s)
                await self.sessions.report(
                    overuse.session_id,
                    StateReport(status=SessionStatus.ERROR, reason=overuse.reason),
                )
            await _sleep_or_stop(stop, 2.0)

    # ------------------------------------------------------------ reconcile

    async def reconcile(self, desired: Assignments) -> None:
        """One pass: every session gets the one next step it needs, run as its own task."""
        wanted = {a.session_id: a for a in desired.sessions}
        try:
            containers = await self.runtime.list_managed()
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
            else:  # a second container claiming a session: only the named one may exist
                await self.runtime.remove_container(container.container_id)
        known = wanted.keys() | actual.keys()
        self.sessions.forget(keep=known)
        # Sockets for every container (adopted ones too, after a restart) and starting session.
        await self.endpoint.sync(actual.keys() | self._busy.keys())
        for session_id in sorted(known):
            if session_id in self._busy:
                continue
            action = decide(wanted.get(session_id), actual.get(session_id), session_id)
            if action is None or self.sessions.already_reported(action):
                continue
            task = asyncio.create_task(self.sessions.do(action, wanted.get(session_id)))
            self._busy[session_id] = task
            task.add_done_callback(functools.partial(self._done, session_id))

    def _done(self, session_id: str, _task: asyncio.Task[None]) -> None:
        self._busy.pop(session_id, None)
        self._kick.set()  # the step may have a follow-up (e.g. RUNNING after PREPARING)

    # ------------------------------------------------------------ images

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

    # ------------------------------------------------------------ in-session endpoint data

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        """Who a session is and its slice (``GET /v1/session`` of its endpoint)."""
        assignment = self._assignment(session_id)
        state = await self.runtime.find(session_id)
        if assignment is None and state is None:
            return None
        info: dict[str, Any] = {"session_id": session_id, "node": self.settings.node_name,
                                "allocation": dict(state.allocation) if state else None}
        if assignment is not None:
            info.update(name=assignment.name, owner=assignment.owner, image=assignment.image,
                        type=assignment.type.value, status=assignment.status.value)
        return info

    def usage(self, session_id: str) -> dict[str, Any] | None:
        """What a session uses, as last measured (``GET /v1/usage`` of its endpoint). GPU
        figures are per device of its slice; ``None`` where nothing measures them."""
        collector = self.usage_collector
        measured = collector.latest.get(session_id) if collector is not None else None
        if measured is None:
            return None
        assignment = self._assignment(session_id)
        gpus = [{"uuid": s.device_uuid, "mem_used": None, "utilization": None}
                for s in (assignment.slices if assignment else [])]
        return {"session_id": session_id, "cpu": measured.cpu, "mem": measured.mem,
                "gpus": gpus}

    def _assignment(self, session_id: str) -> Any:
        sessions = self.desired.sessions if self.desired is not None else []
        return next((a for a in sessions if a.session_id == session_id), None)

    def _spec_options(self, accelerator: Accelerator) -> SpecOptions:
        return SpecOptions(
            node_name=self.settings.node_name,
            accelerator=accelerator.name,
            device_requests=accelerator.device_requests,
            devices={d.uuid: DeviceInfo(d.model, d.memory) for d in accelerator.devices()},
            user=self.settings.session_user,
            pids_limit=self.settings.pids_limit,
        )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


__all__ = ["Agent"]
