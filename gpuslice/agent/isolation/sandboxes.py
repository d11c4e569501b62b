"""Warm network sandboxes: a starting session joins one instead of being wired into the network.

Docker wiring a container into a user-defined network (a veth pair, a bridge port, the embedded
DNS's rules in its namespace) is most of a container start: create + start on the session
network ~255 ms here, joining the network namespace of a running container ~85 ms. So the
agent keeps sandboxes: small containers in the session network (``sleep`` under tini, no
capabilities, the session user) whose network namespace session containers join
(``NetworkMode: container:<id>``). The fence is the network's, so a session in a sandbox is
fenced exactly as one wired in directly; its address (where the node reaches its apps) is the
sandbox's.

What holds:

- A sandbox serves one session at a time, and sessions of one owner only over its whole life
  (bound at its first session): nothing one user's session leaves in a network namespace can
  meet another user's.
- It takes its next session only once the last one's container is removed (its processes are
  gone with it), and it is never removed while a session container is in it (Docker would allow
  it, and leave that session without a network).
- A start never waits for a sandbox: without a ready one it goes the direct way (into the
  network, fenced all the same), and a spare is made behind it. A sandbox that cannot be joined
  (stopped meanwhile) is dropped and the start goes the direct way too.
- Idle ones go after ``IDLE_S``, the oldest first beyond ``MAX_IDLE``; the agent's stop removes
  the idle ones (those of sessions left running stay with them).
- Docker is the truth after a restart (:meth:`Sandboxes.adopt`): a sandbox a session container
  names is that session's; any other is removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ContainerRuntimeError, DockerUnavailable
from gpuslice.agent.runtime.sandbox_ops import LABEL_SANDBOX
from gpuslice.agent.runtime.spec import LABEL_NODE

log = logging.getLogger(__name__)
IDLE_S = 300.0  # an idle sandbox older than this is removed
MAX_IDLE = 32  # idle sandboxes on a node, spares included
SWEEP_S = 30.0
NAME_PREFIX = "gpuslice-sandbox-"


@dataclass(slots=True)
class Sandbox:
    id: str
    image: str
    owner: str = ""  # whose sessions it serves; "" for a spare
    since: float = field(default_factory=time.monotonic)  # idle since, or in use since
    served: bool = False  # a session joined it (or may have): it is its owner's for good


def sandbox_config(image: str, network: str, node: str, *, user: str,
                   sysctls: Mapping[str, str]) -> dict[str, Any]:
    """The Engine API body creating a sandbox: ``sleep`` under tini in ``network``, with the
    sessions' network sysctls (IPv6 off), no capabilities, a few MiB."""
    host: dict[str, Any] = {
        "NetworkMode": network, "Init": True, "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"], "Privileged": False, "ReadonlyRootfs": True,
        "Memory": 32 * 2**20, "MemorySwap": 32 * 2**20, "NanoCpus": 50_000_000,
        "PidsLimit": 8, "RestartPolicy": {"Name": "no"},
        "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}},
    }
    if sysctls:
        host["Sysctls"] = dict(sysctls)
    return {
        "Image": image, "Entrypoint": ["sleep"], "Cmd": ["infinity"], "User": user,
        "Labels": {LABEL_SANDBOX: network, LABEL_NODE: node}, "HostConfig": host,
        "NetworkDisabled": False, "AttachStdout": False, "AttachStderr": False,
    }


class Sandboxes:
    """The node's sandbox pool (see the module's docstring). ``warm``: spares kept ready."""

    def __init__(self, runtime: DockerRuntime, network: str, *, warm: int, user: str,
                 sysctls: Mapping[str, str], say: Callable[[str], None] = log.info) -> None:
        self.runtime = runtime
        self.network = network
        self.warm = warm
        self.user = user
        self.sysctls = dict(sysctls)
        self.say = say
        self._spares: list[Sandbox] = []
        self._idle: dict[str, list[Sandbox]] = {}  # owner -> their idle sandboxes
        self._used: dict[str, Sandbox] = {}  # session id -> the sandbox it is in (or was given)
        self._image = ""  # spares are made of the last started session's image
        self._unfit: set[str] = set()  # images a sandbox could not run in (no ``sleep``)
        self._making: asyncio.Task[None] | None = None
        self._removing: set[asyncio.Task[None]] = set()
        self._closed = False
        self._swept_at = 0.0

    # ------------------------------------------------------------ a session's sandbox

    def take(self, session_id: str, owner: str, image: str) -> str | None:
        """A running sandbox for the session's container to join: one of ``owner``'s idle ones
        (the last released: its namespace is the warmest), else a spare; ``None`` when none is
        ready. Never waits; spares are made again behind it."""
        if (held := self._used.get(session_id)) is not None:
            return held.id  # a start tried again
        if image not in self._unfit:
            self._image = image
        mine = self._idle.get(owner)
        sandbox = mine.pop() if mine else self._spares.pop() if self._spares else None
        if mine is not None and not mine:
            del self._idle[owner]
        self._top_up()
        if sandbox is None:
            return None
        sandbox.owner, sandbox.since = owner, time.monotonic()
        self._used[session_id] = sandbox
        return sandbox.id

    def joined(self, session_id: str, sandbox_id: str | None) -> None:
        """After the start: the session's container is in ``sandbox_id`` ("": in none; ``None``:
        unknown, the start failed). A sandbox it was given but surely did not join (its
        container existed already, made another way) goes back as it was; otherwise it is the
        session's until :meth:`release`."""
        given = self._used.get(session_id)
        if given is None:
            return
        if sandbox_id is None or given.id == sandbox_id:
            given.served, given.since = True, time.monotonic()
            return
        del self._used[session_id]
        if not given.served:
            given.owner = ""  # never joined: still a spare
        self._back(given)

    def unusable(self, session_id: str) -> None:
        """The session could not join the sandbox it was given (it stopped): dropped."""
        if (given := self._used.pop(session_id, None)) is not None:
            self._remove_later(given)

    def died(self, container_id: str) -> None:
        """A sandbox stopped (its ``die`` event): an idle one is dropped. One a session is in
        stays its (the session keeps its namespace; a start again wakes the sandbox)."""
        self._drop([s for s in self._idle_ones() if s.id == container_id])

    async def recheck(self) -> None:
        """After the Docker Engine was away (restarted: every container stopped, events
        missed): idle sandboxes that no longer run are dropped."""
        running = {s.id for s in await self.runtime.list_sandboxes(self.network) if s.running}
        self._drop([s for s in self._idle_ones() if s.id not in running])
        self._top_up()

    def release(self, session_id: str) -> None:
        """The session's container is removed: its sandbox is idle, for its owner's next."""
        if (sandbox := self._used.pop(session_id, None)) is not None:
            sandbox.served = True
            self._back(sandbox)

    def _back(self, sandbox: Sandbox) -> None:
        if self._closed:
            self._remove_later(sandbox)
            return
        sandbox.since = time.monotonic()
        (self._idle.setdefault(sandbox.owner, []) if sandbox.owner else self._spares).append(
            sandbox)
        self._trim(MAX_IDLE)

    # ------------------------------------------------------------ the pool

    async def adopt(self, sessions: Mapping[str, tuple[str, str]]) -> None:
        """At the agent's start: ``sessions`` are the node's session containers that joined a
        sandbox (session id -> (sandbox id, owner)); those sandboxes are theirs, every other
        one is removed (a spare or an idle one of an earlier run: nobody's now)."""
        taken = {sandbox_id: (sid, owner) for sid, (sandbox_id, owner) in sessions.items()}
        for found in await self.runtime.list_sandboxes(self.network):
            if found.id in taken:
                sid, owner = taken[found.id]
                self._used[sid] = Sandbox(found.id, found.image, owner, served=True)
            else:
                await self.runtime.remove_sandbox(found.id)

    def seed(self, image: str) -> None:
        """Make spares of ``image`` (one on the node) before any session started."""
        if not self._image and image not in self._unfit:
            self._image = image
        self._top_up()

    def sweep(self, sessions: Collection[str], listed_at: float) -> None:
        """At most every ``SWEEP_S`` (each reconcile pass offers its listing): idle sandboxes
        past ``IDLE_S`` go, and sandboxes of sessions whose containers were gone from a listing
        made at ``listed_at`` come back (removed some other way than by the session's step: by
        hand, say). ``sessions``: those the listing showed, and those whose step runs (a start
        may not have made its container yet)."""
        if listed_at - self._swept_at < SWEEP_S:
            return
        self._swept_at = listed_at
        for sid, sandbox in list(self._used.items()):
            if sid not in sessions and sandbox.since < listed_at:
                self.release(sid)
        self._trim(MAX_IDLE, older_than=time.monotonic() - IDLE_S)
        self._top_up()

    async def drop_image(self, image: str) -> None:
        """Idle sandboxes made of ``image`` go (Docker keeps an image a container uses)."""
        if self._image == image:
            self._image = ""
        doomed = [s for s in self._idle_ones() if s.image == image]
        for sandbox in doomed:
            self._take_out(sandbox)
        await asyncio.gather(*(self._remove(s) for s in doomed))

    async def close(self) -> None:
        """Remove the idle sandboxes (in-use ones stay with their sessions)."""
        self._closed = True
        if self._making is not None:  # not cancelled: a sandbox half made would be left
            await asyncio.gather(self._making, return_exceptions=True)
        self._trim(0)
        if self._removing:
            await asyncio.gather(*self._removing, return_exceptions=True)

    def counts(self) -> tuple[int, int]:
        """(in use, idle) sandboxes."""
        return len(self._used), len(self._idle_ones())

    def _idle_ones(self) -> list[Sandbox]:
        return [*self._spares, *(s for owned in self._idle.values() for s in owned)]

    def _take_out(self, sandbox: Sandbox) -> None:
        if sandbox in self._spares:
            self._spares.remove(sandbox)
            return
        owned = self._idle[sandbox.owner]
        owned.remove(sandbox)
        if not owned:
            del self._idle[sandbox.owner]

    def _trim(self, keep: int, older_than: float | None = None) -> None:
        """Idle sandboxes beyond ``keep`` go, the oldest first, and owned ones idle since
        before ``older_than`` (spares stay: they are the reserve)."""
        idle = sorted(self._idle_ones(), key=lambda s: s.since)
        doomed = idle[:max(0, len(idle) - keep)]
        if older_than is not None:
            doomed += [s for s in idle[len(doomed):] if s.owner and s.since < older_than]
        self._drop(doomed)

    def _drop(self, idle: list[Sandbox]) -> None:
        """These idle sandboxes leave the pool at once, and Docker soon."""
        for sandbox in idle:
            self._take_out(sandbox)
            self._remove_later(sandbox)

    def _remove_later(self, sandbox: Sandbox) -> None:
        task = asyncio.create_task(self._remove(sandbox))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    async def _remove(self, sandbox: Sandbox) -> None:
        try:
            await self.runtime.remove_sandbox(sandbox.id)
        except ContainerRuntimeError as err:  # the next start's adopt removes it
            log.warning("removing network sandbox %s: %s", sandbox.id[:12], err)

    def _top_up(self) -> None:
        """Make spares up to ``warm``, one at a time, behind the starts."""
        if (self._closed or not self._image or len(self._spares) >= self.warm
                or (self._making is not None and not self._making.done())):
            return
        self._making = asyncio.create_task(self._make_spares())

    async def _make_spares(self) -> None:
        while not self._closed and self._image and len(self._spares) < self.warm:
            image = self._image
            name = f"{NAME_PREFIX}{uuid.uuid4().hex[:12]}"
            config = sandbox_config(image, self.network, self.runtime.node_name,
                                    user=self.user, sysctls=self.sysctls)
            try:
                sandbox_id = await self.runtime.start_sandbox(config, name)
            except DockerUnavailable:
                return  # tried again at the next start
            except ContainerRuntimeError as err:
                self._unfit.add(image)
                if self._image == image:
                    self._image = ""
                self.say(f"agent: no network sandbox of image {image} ({err}); its sessions "
                         "start the direct way")
                return
            if self._closed:
                await self.runtime.remove_sandbox(sandbox_id)
                return
            self._spares.append(Sandbox(sandbox_id, image))
