"""The node agent: dial the manager, and keep this node's containers as the manager wants them.

This is the wiring: ``Agent`` waits for Docker, fences the session network, joins the manager,
then runs five supervised loops in one process until told to stop: heartbeats
(``heartbeats.py``: devices, capacity, usage up), and assignments, Docker events,
reconciliation and GPU sampling (``loops.py``). Each session's step (``sessions.py``) runs as
its own task, at most one per session (``steps.py``, the step machine). Requests that come with
the assignments (logs, exec, commit) are served by ``requests.py``; each session container
gets its own in-session endpoint socket (``endpoint.py``), whose data (a session's identity and
usage) the agent answers. Nothing that matters is kept in memory: desired state is the
manager's, actual state is Docker's labels, so a restarted agent picks up where it was.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuslice.agent import capshim, model_calls, usage_calls
from gpuslice.agent.accelerators import Accelerator, detect
from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.heartbeats import Heartbeats
from gpuslice.agent.identity import EngineNameLock
from gpuslice.agent.isolation.firewall import FirewallError
from gpuslice.agent.isolation.network import IsolationError, SessionNetwork, ipv6_available
from gpuslice.agent.isolation.sandboxes import Sandboxes
from gpuslice.agent.loops import Loops, supervise
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
from gpuslice.agent.runtime.spec import NO_IPV6, DeviceInfo, SpecOptions
from gpuslice.agent.sampling import GpuSampler
from gpuslice.agent.sessions import SessionActions
from gpuslice.agent.settings import AgentSettings
from gpuslice.agent.steps import Steps
from gpuslice.agent.streams import StreamService
from gpuslice.agent.usage import UsageCollector
from gpuslice.common import heap
from gpuslice.common.backoff import Backoff
from gpuslice.common.hosts import is_loopback
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.logs import bind
from gpuslice.common.waits import wait_event

log = logging.getLogger("gpuslice.agent")
# How long a node's registration waits while the manager says another agent runs it (one that
# stopped just now is live to the manager for three of its heartbeats, 15 s by default).
NODE_IN_USE_WAIT_S = 60.0


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
        self._heartbeat_now = asyncio.Event()  # images changed, or the manager asked (rescan)
        self.ready = asyncio.Event()  # joined, and the manager has its first heartbeat
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
        self.steps = Steps(settings, self.runtime, self.endpoint, self.streams)

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
        self.sampler = sampler = GpuSampler(accelerator)
        self.usage_collector = UsageCollector(self.settings, self.runtime, accelerator, sampler)
        heartbeats = Heartbeats(
            self.link, self.usage_collector, self.runtime, self.settings.docker_url,
            busy=self.steps.busy, now=self._heartbeat_now, say=self.say,
            reregister=self._reregister,
        )
        usage_calls.register(self.endpoint, accelerator, self.runtime)
        name_lock: EngineNameLock | None = None
        try:
            await self._wait_for_docker(stop)
            # Before the network, the sandboxes or any container is touched: a second live
            # agent of this name on this engine would share them (agent/identity.py).
            name_lock = EngineNameLock(await self.runtime.engine_id(), self.settings.node_name)
            name_lock.acquire()
            self.network = await self._isolate()
            self.sandboxes = await self._sandboxes()
            self.steps.use(SessionActions(
                self.settings, self.runtime, self.link, self._spec_options(accelerator),
                self.say, endpoint=self.endpoint, shim=await self._cap_shim(),
                sandboxes=self.sandboxes,
            ), self.sandboxes)
            credential = await self._connect(stop)
            bind(node_id=credential.node_id)  # the loops below start after: they inherit it
            # The manager knows the node's capacity before anyone is told it joined: a session
            # asked for at once must not be refused as fitting no node.
            if not await heartbeats.first(stop):
                return
            self.say(
                f"agent {self.settings.node_name}: joined {self.link.manager_url} "
                f"as node {credential.node_id}"
            )
            if not _private_link(self.link.manager_url):
                self.say("agent: warning: the link to the manager is plain HTTP; its "
                         "credential and sessions' environment cross the network readable: "
                         "serve the manager over HTTPS (docs/operations.md: \"TLS\")")
            self.ready.set()
            loops = Loops(self.settings, self.link, self.runtime, self.steps, self.requests,
                          sampler, heartbeat_now=self._heartbeat_now, say=self.say)
            tasks = [asyncio.create_task(supervise(name, body, stop))
                     for name, body in [("heartbeat", heartbeats.loop), *loops.named()]]
            with heap.settled():
                await stop.wait()
            busy = self.steps.busy.values()
            for task in [*tasks, *busy]:
                task.cancel()
            await asyncio.gather(*tasks, *busy, return_exceptions=True)
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
            if name_lock is not None:
                name_lock.release()

    # ------------------------------------------------------------ start

    async def _wait_for_docker(self, stop: asyncio.Event) -> None:
        said = None
        while not stop.is_set() and (problem := await self.runtime.problem()) is not None:
            if problem != said:  # say it once, and again only if the cause changes
                self.say(f"agent: {problem}; waiting for it")
                said = problem
            await wait_event(stop, 1.0)
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
        register = registration(self.settings, self.runtime.agent_id)
        backoff = Backoff(0.5, 10.0, jitter=0)
        loop = asyncio.get_running_loop()
        in_use_until, said = loop.time() + NODE_IN_USE_WAIT_S, False
        while True:
            try:
                return await self.link.connect(register)
            except (NotRegistered, VersionMismatch):
                raise
            except LinkError as err:
                if (err.status == 409 and "node_in_use" in str(err) and not stop.is_set()
                        and loop.time() < in_use_until):
                    # The node's last agent may have stopped just now (a platform moved or
                    # restored elsewhere): the manager takes it for live a few heartbeats more.
                    if not said:
                        self.say(f"agent: {err}; waiting up to {NODE_IN_USE_WAIT_S:.0f} s for "
                                 "it to stop")
                        said = True
                    await backoff.sleep(stop)
                    continue
                if err.status in (400, 401, 403, 404, 409, 422):
                    raise
                self.say(f"agent: manager not reachable yet ({err}); retrying")
                await backoff.sleep(stop)

    async def _reregister(self) -> None:
        self.say("agent: the manager no longer accepts this node's credential")
        self.link.forget()
        await self._connect(asyncio.Event())

    # ------------------------------------------------------------ in-session endpoint data

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        """Who a session is and its slice (``GET /v1/session`` of its endpoint)."""
        assignment = self.steps.assignment(session_id)
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
            assignment = self.steps.assignment(session_id)
            gpus = [{"uuid": s.device_uuid, "mem_used": None, "utilization": None}
                    for s in (assignment.slices if assignment else [])]
        else:
            gpus = [g.model_dump() for g in now]
        processes = self.sampler.processes(session_id) if self.sampler is not None else []
        return {"session_id": session_id, "cpu": measured.cpu, "mem": measured.mem,
                "gpus": gpus, "processes": processes}

    def _spec_options(self, accelerator: Accelerator) -> SpecOptions:
        return SpecOptions(
            node_name=self.settings.node_name,
            accelerator=accelerator.name,
            device_requests=accelerator.device_requests,
            devices={d.uuid: DeviceInfo(d.model, d.memory) for d in accelerator.devices()},
            user=self.settings.session_user,
            pids_limit=self.settings.pids_limit,
            allow_sudo=self.settings.allow_sudo,
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
    return is_loopback(parts.hostname or "")

