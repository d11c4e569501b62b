"""The node agent: dial the manager, and keep this node's containers as the manager wants them.

Five supervised loops share one process: heartbeats (devices, capacity, usage up), assignments
(long-poll: desired state down, at once when it changes), Docker events (a container that stops
is noticed at once), reconciliation, and GPU sampling (per-session GPU figures, and the
watchdog's decision on each reading; on mock nodes too, over their simulated processes).
Reconciliation runs whenever one of the others has news, one pass at a time; each session's
step (``sessions.py``) runs as its own task, at most one per session. Requests that come with
the assignments (logs, exec, commit) are served by ``requests.py``; each session container
gets its own in-session endpoint socket (``endpoint.py``). Nothing that matters is kept in
memory: desired state is the manager's, actual state is Docker's labels, so a restarted agent
picks up where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuslice.agent import capshim, model_calls, usage_calls
from gpuslice.agent.accelerators import Accelerator, detect
from gpuslice.agent.config import AgentSettings
from gpuslice.agent.decide import Act, Action, decide
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.isolation.firewall import FirewallError
from gpuslice.agent.isolation.network import IsolationError, SessionNetwork, ipv6_available
from gpuslice.agent.isolation.sandboxes import Sandboxes
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
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    DockerUnavailable,
    RuntimeEvent,
)
from gpuslice.agent.runtime.spec import NO_IPV6, DeviceInfo, SpecOptions, container_name
from gpuslice.agent.sampling import GpuSampler
from gpuslice.agent.sessions import SessionActions
from gpuslice.agent.streams import StreamService
from gpuslice.agent.usage import UsageCollector
from gpuslice.agent.watchdog import find_overuse, slice_limits
from gpuslice.common import heap
from gpuslice.common.docker_engine import explain
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.logs import bind
from gpuslice.common.schemas.agents import Assignment, Assignments, Heartbeat, StateReport
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.common.waits import wait_event

log = logging.getLogger("gpuslice.agent")
# How long a long-poll of the assignments waits for a change. Each wait that ends unchanged is an
# answer built in full for nothing: at 50 s a 1,000-node fleet costs the manager 20 of those a
# second, not 40 (about a tenth of its CPU, bench/agents.py). Proxies in between must allow it
# (the README's nginx example: 120 s); the manager accepts up to 60.
LONG_POLL_S = 50.0
RECONCILE_SAFETY_S = 10.0
DEFAULT_HEARTBEAT_MS = 5000
# The longest a heartbeat waits for a fresh report before it sends the last one again.
COLLECT_BUDGET_S = 1.0
_ENDED = (SessionStatus.TERMINATED, SessionStatus.ERROR)
_REPORTED = (SessionStatus.PREPARING, SessionStatus.RUNNING, *_ENDED)  # the agent's own word


class Agent:
    """One node's agent. ``await agent.run(stop)`` until ``stop`` is set.

    ``accelerator`` and ``link`` default to the detected one and a link to
    ``settings.manager_urls`` (failing over between them).
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
        self.link = link or ManagerLink(settings.manager_urls, settings.data_dir,
                                        verify=_verify(settings.ca_bundle))
        self.desired: Assignments | None = None
        self._kick = asyncio.Event()
        self._busy: dict[str, asyncio.Task[None]] = {}  # session id -> its running work
        # busy session -> its container that stopped meanwhile (and its name if cleanly)
        self._stopped: dict[str, tuple[str, str | None]] = {}
        self._stepped_on: dict[str, Assignment | None] = {}  # busy session -> its assignment
        self._heartbeat_now = asyncio.Event()  # images changed, or the manager asked (rescan)
        self._rescan: int | None = None
        self.ready = asyncio.Event()  # joined, and the manager has its first heartbeat
        self._manager_away: str | None = None  # said that the manager is unreachable: why
        self.usage_collector: UsageCollector | None = None  # made once the accelerator is known
        self.sampler: GpuSampler | None = None
        self.network: SessionNetwork | None = None  # the fence, once set up (agent/isolation)
        self.sandboxes: Sandboxes | None = None  # warm network sandboxes, with the fence
        self.endpoint = SessionEndpoint(
            settings.data_dir, data=self, link=self.link, user=settings.session_user
        )
        self.streams = StreamService(self.runtime, self.link)
        model_calls.install(self.endpoint)
        self.requests = RequestRunner(RequestContext(
            runtime=self.runtime, link=self.link, say=self.say,
            images_changed=self._heartbeat_now.set, streams=self.streams,
        ))

    async def run(self, stop: asyncio.Event) -> None:
        if self.accelerator is None:
            found = detect(self.settings)
            self.accelerator = found.accelerator
            self.say(f"agent {self.settings.node_name}: {found.message}")
        accelerator = self.accelerator
        # The node's credential and the sessions' files are here: the agent's alone (dockerd
        # reads the bind mounts as root; sessions see only their own mounts).
        self.settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.settings.data_dir.chmod(0o700)
        self.sampler = GpuSampler(accelerator)
        self.usage_collector = UsageCollector(
            self.settings, self.runtime, accelerator, self.sampler
        )
        usage_calls.register(self.endpoint, accelerator, self.runtime)
        try:
            await self._wait_for_docker(stop)
            self.network = await self._isolate()
            self.sandboxes = await self._sandboxes()
            self.sessions = SessionActions(
                self.settings, self.runtime, self.link, self._spec_options(accelerator),
                self.say, endpoint=self.endpoint, shim=await self._cap_shim(),
                sandboxes=self.sandboxes,
            )
            credential = await self._connect(stop)
            bind(node_id=credential.node_id)  # the loops below start after: they inherit it
            # The manager knows the node's capacity before anyone is told it joined: a session
            # asked for at once must not be refused as fitting no node.
            if not await self._first_beat(stop):
                return
            self.say(
                f"agent {self.settings.node_name}: joined {self.link.manager_url} "
                f"as node {credential.node_id}"
            )
            if not _private_link(self.link.manager_url):
                self.say("agent: warning: the link to the manager is plain HTTP; its "
                         "credential and sessions' environment cross the network readable: "
                         "serve the manager over HTTPS (README: \"TLS\")")
            self.ready.set()
            loops = [
                self._supervise("heartbeat", self._heartbeat_loop, stop),
                self._supervise("assignments", self._assignment_loop, stop),
                self._supervise("docker events", self._event_loop, stop),
                self._supervise("reconcile", self._reconcile_loop, stop),
                self._supervise("gpu sampling", self._sampling_loop, stop),
            ]
            tasks = [asyncio.create_task(loop) for loop in loops]
            with heap.settled():
                await stop.wait()
            for task in [*tasks, *self._busy.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._busy.values(), return_exceptions=True)
            await self.requests.close()
        finally:
            await self.streams.close()
            await self.endpoint.stop()
            if self.sandboxes is not None:  # the idle ones: the network can go with them
                await self.sandboxes.close()
            await self._unfence()
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

    async def _isolate(self) -> SessionNetwork | None:
        """The node's session network and its fence (``agent/isolation``), unless turned off."""
        if self.settings.network.isolation == "off":
            self.say("agent: network isolation is off: sessions share Docker's default bridge "
                     "and can reach each other, the host and the manager")
            return None
        network = SessionNetwork(self.runtime, self.settings.node_name, self.settings.network,
                                 self.settings.manager_url, say=self.say)
        await network.start()
        return network

    async def _sandboxes(self) -> Sandboxes | None:
        """The node's warm network sandboxes (``agent/isolation/sandboxes.py``): those of
        sessions left running taken back, the others removed, spares made of the default
        session image when the node has it."""
        if self.network is None or self.settings.network.warm_sandboxes == 0:
            return None
        pool = Sandboxes(self.runtime, self.network.name,
                         warm=self.settings.network.warm_sandboxes,
                         user=self.settings.session_user,
                         sysctls=NO_IPV6 if ipv6_available() else {}, say=self.say)
        joined = {c.session_id: (c.sandbox, c.owner)
                  for c in await self.runtime.list_managed() if c.sandbox}
        await pool.adopt(joined)
        if await self.runtime.has_image(DEFAULT_SESSION_IMAGE):
            pool.seed(DEFAULT_SESSION_IMAGE)
        return pool

    async def _cap_shim(self) -> Path | None:
        """The cap shim library, built once per node, when hard caps are on."""
        if self.settings.hard_caps.mode == "none":
            return None
        return await asyncio.to_thread(capshim.build, self.settings.data_dir / "capshim")

    async def _unfence(self) -> None:
        if self.network is None:
            return
        try:
            await self.network.stop()
        except (DockerUnavailable, IsolationError, FirewallError) as err:
            log.warning("taking the session network down: %s", err)

    async def _connect(self, stop: asyncio.Event) -> Credential:
        register = registration(self.settings)
        delay = 0.5
        while True:
            try:
                return await self.link.connect(register)
            except (NotRegistered, VersionMismatch):
                raise
            except LinkError as err:
                if err.status in (400, 401, 403, 404, 409, 422):
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
        """Heartbeat every interval. Liveness never waits on a busy Docker Engine (listing
        containers blocks for seconds while others are being created): past a short budget
        the last complete report goes again and the fresh one follows when it is ready, so a
        node starting many sessions is not taken for lost."""
        collector = self.usage_collector
        assert collector is not None, "run() makes the collector before the loops"
        body: Heartbeat | None = None
        collecting: asyncio.Task[Heartbeat] | None = None
        try:
            while not stop.is_set():
                credential = self.link.credential
                interval_ms = (credential.heartbeat_interval_ms if credential
                               else DEFAULT_HEARTBEAT_MS)
                collecting = collecting or asyncio.create_task(self._collect())
                budget = None if body is None else min(COLLECT_BUDGET_S, interval_ms / 2000)
                done, _ = await asyncio.wait({collecting}, timeout=budget)
                if done:
                    body, collecting = collecting.result(), None
                assert body is not None
                await self._send(body)
                if done:  # its samples reached the manager (a report sent again has no new)
                    collector.sent()
                await wait_event(self._heartbeat_now, interval_ms / 1000)
                self._heartbeat_now.clear()
        finally:
            if collecting is not None:
                collecting.cancel()

    async def _collect(self) -> Heartbeat:
        """What the node has and runs now."""
        collector = self.usage_collector
        assert collector is not None, "run() makes the collector before any heartbeat"
        try:
            body = await collector.heartbeat()
            await self.runtime.prune_files(keep=set(self._busy))
        except DockerUnavailable as err:
            # Still a heartbeat: the node stays ALIVE while Docker is away, so that sessions
            # a live-restore engine keeps running are not called lost meanwhile.
            body = collector.without_engine(explain(err, self.settings.docker_url))
        return body

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
        """One heartbeat, collected and sent now."""
        collector = self.usage_collector
        assert collector is not None, "run() makes the collector before any heartbeat"
        await self._send(await self._collect())
        collector.sent()

    async def _send(self, body: Heartbeat) -> None:
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
            desired, unreadable = await self.link.assignments(version, LONG_POLL_S)
            version = desired.version
            for bad in unreadable:  # never started; the manager hears why
                with contextlib.suppress(LinkError):
                    await self.sessions.report(bad.session_id, StateReport(
                        status=SessionStatus.ERROR, reason=bad.reason[:2000]))
            before, self.desired = self.desired, desired
            self.start_placed(desired)
            self.stop_wanted(desired)
            if self._news(before, desired):
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
                    if self.sandboxes is not None:
                        with contextlib.suppress(ContainerRuntimeError):  # next time, then
                            await self.sandboxes.recheck()
                lost = False
                log.info("docker events: connected")
            if event.kind in ("die", "destroy") and not event.session_id:
                if self.sandboxes is not None:  # a network sandbox's (no session's)
                    self.sandboxes.died(event.container_id)
            elif event.kind == "die" and event.session_id and event.container_id:
                self.sessions.died(event.session_id)
                self.finish_stopped(event.session_id, event.container_id,
                                    event.name if event.exit_code == 0 else None)
            if (event.session_id not in self._busy and not self._own_doing(event)
                    and (event.session_id or event.kind in ("connected", "disconnected"))):
                # A busy session's container is its step's (a start or removal the agent
                # made, a stop taken by ``finish_stopped`` just above): the step's end kicks
                # reconcile then if need be, one pass, not two (each lists the node's
                # containers).
                self._kick.set()
            if stop.is_set():
                return

    def _own_doing(self, event: RuntimeEvent) -> bool:
        """An event of what the agent did and told already: the start of a container it
        reported RUNNING, or the removal of one whose end it told (its step may be over by
        the time the event comes, on a busy node often). Nothing is left to do."""
        reported = self.sessions.reported.get(event.session_id)
        return ((event.kind == "start" and reported is SessionStatus.RUNNING)
                or (event.kind == "destroy" and reported in _ENDED))

    async def _reconcile_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await wait_event(self._kick, RECONCILE_SAFETY_S)
            self._kick.clear()
            if self.desired is not None:
                await self.reconcile(self.desired)

    async def _sampling_loop(self, stop: asyncio.Event) -> None:
        """Read the GPUs every ``sample_interval_ms``: per-session figures for heartbeats and
        the endpoint, and the watchdog's decision on the same reading."""
        sampler = self.sampler
        assert sampler is not None, "run() makes the sampler before the loops"
        while not stop.is_set():
            containers = [c for c in await self.runtime.list_managed() if c.running]
            reading = await asyncio.to_thread(sampler.read, containers)
            for overuse in find_overuse(reading.devices, reading.pid_sessions,
                                        slice_limits(containers),
                                        tolerance=self.settings.watchdog_tolerance):
                sid = overuse.session_id
                if sid in self._busy:  # one step per session: the next reading decides again
                    continue
                self.say(f"agent: session {sid}: {overuse.detail}")
                # The session's one step, so reconcile cannot see the stopped container first
                # and report it as having exited by itself.
                ending = Action(Act.STOP, sid, SessionStatus.ERROR, reason=overuse.reason)
                self._step(sid, self.sessions.do(ending, None))
            await _sleep_or_stop(stop, self.settings.sample_interval_ms / 1000)

    # ------------------------------------------------------------ reconcile

    async def reconcile(self, desired: Assignments) -> None:
        """One pass: every session gets the one next step it needs, run as its own task."""
        wanted = {a.session_id: a for a in desired.sessions}
        listed_at = time.monotonic()
        try:  # busy sessions' stopped containers are their steps': not inspected
            containers = await self.runtime.list_managed(busy=set(self._busy))
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
        if self.sandboxes is not None:
            self.sandboxes.sweep(actual.keys() | self._busy.keys(), listed_at)
        self.streams.forget(keep={sid for sid, c in actual.items() if c.running})
        for session_id, assignment in wanted.items():
            running = actual.get(session_id)
            if assignment.apps and assignment.desired == "running" and running and running.running:
                self.streams.autostart(session_id, assignment.apps)
        # Sockets for every container (adopted ones too, after a restart) and starting session.
        await self.endpoint.sync(actual.keys() | self._busy.keys())
        for session_id in sorted(known):
            if session_id in self._busy:
                continue
            action = decide(wanted.get(session_id), actual.get(session_id), session_id)
            if action is None or self.sessions.already_reported(action) or self._ended(action):
                continue
            self._step(session_id, self.sessions.do(action, wanted.get(session_id)))

    def start_placed(self, desired: Assignments) -> None:
        """Start the sessions just placed here at once, without waiting for a listing of the
        node's containers (dockerd answers listings slowly while it starts others, seconds
        on a busy node). Safe without the look: a start creates the container under the
        session's name first and adopts the one that exists (Docker's 409)."""
        for a in desired.sessions:
            sid = a.session_id
            if (a.status is SessionStatus.SCHEDULED and a.desired == "running"
                    and sid not in self._busy and sid not in self.sessions.reported):
                self._step(sid, self.sessions.do(Action(Act.START, sid), a))

    def stop_wanted(self, desired: Assignments) -> None:
        """Stop the sessions the manager wants stopped at once, without waiting for a listing
        (a session queued behind a full node waits on this stop). The stop goes by the
        container's name, which is the session's; a busy session's stop is reconcile's after
        its step (whose end kicks a pass)."""
        for a in desired.sessions:
            sid = a.session_id
            if (a.desired == "stopped" and sid not in self._busy
                    and self.sessions.reported.get(sid) not in _ENDED):
                stop = Action(Act.STOP, sid, SessionStatus.TERMINATED, reason="stopped")
                self._step(sid, self.sessions.do(stop, a))

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
            if a.session_id not in self._busy and self._moved(was, a, own):
                return True
        return any(sid not in self._busy and self.sessions.reported.get(sid) not in _ENDED
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

    def finish_stopped(self, session_id: str, container_id: str, clean: str | None) -> None:
        """A container stopped by itself: take the session's step (report how it ended)
        without a listing of the node's containers. ``clean``: its name, when its ``die``
        event says it exited with code 0 (then nothing needs looking up; else it is
        inspected, for an OOM kill or a runtime error)."""
        if self.desired is None:
            return
        if session_id in self._busy:  # its step ends first (a batch that ended as it started)
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
            wanted = self._assignment(session_id)
            action = decide(wanted, state, session_id)
            if action is not None and action.act is Act.FINISH and not self._ended(action):
                await self.sessions.do(action, wanted)

        self._step(session_id, step())

    def _step(self, session_id: str, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as the session's one step (reconcile leaves it alone meanwhile)."""
        task = asyncio.create_task(work)
        self._busy[session_id] = task
        self._stepped_on[session_id] = self._assignment(session_id)
        task.add_done_callback(functools.partial(self._done, session_id))

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
        self._busy.pop(session_id, None)
        stepped_on = self._stepped_on.pop(session_id, None)
        if (stopped := self._stopped.pop(session_id, None)) is not None:
            self.finish_stopped(session_id, *stopped)
            if session_id in self._busy:
                return  # its next step; that one's end is looked at in turn
        if self._left_to_do(session_id, task, stepped_on):
            self._kick.set()

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
        now = self._assignment(session_id)
        reported = self.sessions.reported.get(session_id)
        if reported is not SessionStatus.RUNNING and reported not in _ENDED:
            return True
        if any(a is not None and a.apps for a in (now, stepped_on)):
            return True
        if now is None and reported in _ENDED:
            return False  # gone from the assignments once its end was told
        # Any status the agent reports may come back meanwhile, not only its last report.
        return self._moved(stepped_on, now, _REPORTED)

    # ------------------------------------------------------------ images

    async def _remove_images(self, references: list[str]) -> None:
        # Docker refuses to delete an image a container uses (409): it is tried again with
        # the next assignments, which list it until a heartbeat no longer reports it.
        if self.sandboxes is not None:
            for ref in references:
                await self.sandboxes.drop_image(ref)
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
        """What a session uses, as last measured (``GET /v1/usage`` of its endpoint): CPU and
        memory of its last heartbeat, GPU figures of its own processes at the last reading
        (per device of its slice; ``None`` where nothing measures them)."""
        collector = self.usage_collector
        measured = collector.latest.get(session_id) if collector is not None else None
        if measured is None:
            return None
        now = self.sampler.latest.get(session_id) if self.sampler is not None else None
        if now is None:
            assignment = self._assignment(session_id)
            gpus = [{"uuid": s.device_uuid, "mem_used": None, "utilization": None}
                    for s in (assignment.slices if assignment else [])]
        else:
            gpus = [g.model_dump() for g in now]
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
            network=self.network.name if self.network is not None else None,
            ipv6_off=ipv6_available(),
        )


def _verify(ca_bundle: Path | None) -> ssl.SSLContext | bool:
    """How the link checks an https:// manager: against ``ca_bundle`` (PEM) when given, else
    the system's CAs."""
    return ssl.create_default_context(cafile=str(ca_bundle)) if ca_bundle is not None else True


def _private_link(url: str) -> bool:
    """HTTPS, or plain HTTP that never leaves this machine."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    await wait_event(stop, seconds)


__all__ = ["Agent"]
