"""The agent's supervised loops besides heartbeats (``heartbeats.py``): assignments (long-poll:
desired state down, at once when it changes), Docker events (a container that stops is noticed
at once), reconciliation (one pass at a time, whenever one of the others has news) and GPU
sampling (per-session GPU figures, and the watchdog's decision on each reading; on mock nodes
too, over their simulated processes). ``supervise`` keeps each one going."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpuslice.agent.decide import Act, Action
from gpuslice.agent.manager_link import LinkError, ManagerLink
from gpuslice.agent.requests import RequestRunner
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ContainerRuntimeError, DockerUnavailable
from gpuslice.agent.sampling import GpuSampler
from gpuslice.agent.settings import AgentSettings
from gpuslice.agent.steps import Steps
from gpuslice.agent.watchdog import find_overuse, slice_limits
from gpuslice.common.backoff import Backoff
from gpuslice.common.schemas.agents import StateReport
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.common.waits import wait_event

log = logging.getLogger("gpuslice.agent")
# How long a long-poll of the assignments waits for a change. Each wait that ends unchanged is an
# answer built in full for nothing: at 50 s a 1,000-node fleet costs the manager 20 of those a
# second, not 40 (about a tenth of its CPU, bench/agents.py). Proxies in between must allow it
# (the nginx example in docs/operations.md: 120 s); the manager accepts up to 60.
LONG_POLL_S = 50.0
RECONCILE_SAFETY_S = 10.0

Loop = Callable[[asyncio.Event], Awaitable[None]]


async def supervise(name: str, body: Loop, stop: asyncio.Event) -> None:
    """Run a loop forever: log a failure, back off with jitter, go on. The manager or
    Docker being away is logged once per cause (the agent says so besides)."""
    backoff = Backoff(0.5, 15.0)
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
            backoff.reset()
        await backoff.sleep(stop)


@dataclass(eq=False)
class Loops:
    """The loops that feed the steps (``steps.py``) and answer the manager's requests."""

    settings: AgentSettings
    link: ManagerLink
    runtime: DockerRuntime
    steps: Steps
    requests: RequestRunner
    sampler: GpuSampler
    heartbeat_now: asyncio.Event  # set: a heartbeat at once (images removed, a rescan)
    say: Callable[[str], None]
    _rescan: int | None = field(default=None, init=False)  # the last assignments' number

    def named(self) -> list[tuple[str, Loop]]:
        return [
            ("assignments", self.assignments),
            ("docker events", self.events),
            ("reconcile", self.reconcile),
            ("gpu sampling", self.sampling),
        ]

    async def assignments(self, stop: asyncio.Event) -> None:
        steps = self.steps
        version = None
        while not stop.is_set():
            desired, unreadable = await self.link.assignments(version, LONG_POLL_S)
            version = desired.version
            for bad in unreadable:  # never started; the manager hears why
                with contextlib.suppress(LinkError):
                    await steps.sessions.report(bad.session_id, StateReport(
                        status=SessionStatus.ERROR, reason=bad.reason[:2000]))
            steps.take(desired)
            self.requests.take(desired.requests)  # each delivered in this answer only
            if self._rescan is not None and desired.rescan != self._rescan:
                self.heartbeat_now.set()
            self._rescan = desired.rescan
            if desired.remove_images:
                await self._remove_images(desired.remove_images)

    async def events(self, stop: asyncio.Event) -> None:
        steps = self.steps
        lost = False
        async for event in self.runtime.events():
            if event.kind == "disconnected":
                self.say(f"agent: lost the Docker Engine ({event.detail}); sessions wait for "
                         "it, reconnecting")
                lost = True
            elif event.kind == "connected":
                if lost:
                    self.say("agent: the Docker Engine is back; re-adopting its containers")
                    if steps.sandboxes is not None:
                        with contextlib.suppress(ContainerRuntimeError):  # next time, then
                            await steps.sandboxes.recheck()
                lost = False
                log.info("docker events: connected")
            if event.kind in ("die", "destroy") and not event.session_id:
                if steps.sandboxes is not None:  # a network sandbox's (no session's)
                    steps.sandboxes.died(event.container_id)
            elif event.kind == "die" and event.session_id and event.container_id:
                steps.sessions.died(event.session_id)
                steps.finish_stopped(event.session_id, event.container_id,
                                     event.name if event.exit_code == 0 else None)
            if (event.session_id not in steps.busy and not steps.own_doing(event)
                    and (event.session_id or event.kind in ("connected", "disconnected"))):
                # A busy session's container is its step's (a start or removal the agent
                # made, a stop taken by ``finish_stopped`` just above): the step's end kicks
                # reconcile then if need be, one pass, not two (each lists the node's
                # containers).
                steps.kick.set()
            if stop.is_set():
                return

    async def reconcile(self, stop: asyncio.Event) -> None:
        steps = self.steps
        while not stop.is_set():
            await wait_event(steps.kick, RECONCILE_SAFETY_S)
            steps.kick.clear()
            if steps.desired is not None:
                await steps.reconcile(steps.desired)

    async def sampling(self, stop: asyncio.Event) -> None:
        """Read the GPUs every ``sample_interval_ms``: per-session figures for heartbeats and
        the endpoint, and the watchdog's decision on the same reading."""
        steps = self.steps
        while not stop.is_set():
            containers = [c for c in await self.runtime.list_managed() if c.running]
            reading = await asyncio.to_thread(self.sampler.read, containers)
            for overuse in find_overuse(reading.devices, reading.pid_sessions,
                                        slice_limits(containers),
                                        tolerance=self.settings.watchdog_tolerance):
                sid = overuse.session_id
                if sid in steps.busy:  # one step per session: the next reading decides again
                    continue
                self.say(f"agent: session {sid}: {overuse.detail}")
                # The session's one step, so reconcile cannot see the stopped container first
                # and report it as having exited by itself.
                ending = Action(Act.STOP, sid, SessionStatus.ERROR, reason=overuse.reason)
                steps.step(sid, steps.sessions.do(ending, None))
            await wait_event(stop, self.settings.sample_interval_ms / 1000)

    async def _remove_images(self, references: list[str]) -> None:
        # Docker refuses to delete an image a container uses (409): it is tried again with
        # the next assignments, which list it until a heartbeat no longer reports it.
        if self.steps.sandboxes is not None:
            for ref in references:
                await self.steps.sandboxes.drop_image(ref)
        removed = [ref for ref in references if await self.runtime.remove_image(ref)]
        if removed:
            self.say(f"agent: removed image(s) {', '.join(removed)} (gone from the catalog)")
            self.heartbeat_now.set()
