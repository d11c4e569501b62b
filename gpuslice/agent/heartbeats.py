"""The agent's heartbeats: what the node has and uses, sent every interval.

The first heartbeat is the agent's first word with the manager (a stored credential needs no
call to connect), and "joined" means the manager has it. Liveness never waits on a busy Docker
Engine: the report is collected in the background and, past a short budget, the last complete
one goes again. While Docker is away the heartbeat still goes, saying why (``engine_error``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

from gpuslice.agent.manager_link import LinkError, ManagerLink, VersionMismatch
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import DockerUnavailable
from gpuslice.agent.usage import UsageCollector
from gpuslice.common.backoff import Backoff
from gpuslice.common.docker_engine import explain
from gpuslice.common.schemas.agents import Heartbeat
from gpuslice.common.waits import wait_event

DEFAULT_HEARTBEAT_MS = 5000
# The longest a heartbeat waits for a fresh report before it sends the last one again.
COLLECT_BUDGET_S = 1.0


@dataclass(eq=False)
class Heartbeats:
    """The node's heartbeats. ``now`` set: send one at once (images changed, a rescan);
    ``busy``: the sessions whose step runs (their files are kept while they start);
    ``reregister``: called when the manager no longer accepts the node's credential."""

    link: ManagerLink
    collector: UsageCollector
    runtime: DockerRuntime
    docker_url: str | None
    busy: Collection[str]
    now: asyncio.Event
    say: Callable[[str], None]
    reregister: Callable[[], Awaitable[None]]
    _manager_away: str | None = field(default=None, init=False)  # said it is away: why
    # The last complete report the manager took: what goes again while Docker is too busy to
    # report, from the very first beat of the loop (right after ``first``) on.
    _last: Heartbeat | None = field(default=None, init=False)

    async def loop(self, stop: asyncio.Event) -> None:
        """Heartbeat every interval. Liveness never waits on a busy Docker Engine (listing
        containers blocks for seconds while others are being created): past a short budget
        the last complete report goes again and the fresh one follows when it is ready, so a
        node starting many sessions is not taken for lost."""
        body: Heartbeat | None = self._last
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
                    self.collector.sent()
                    self._last = body
                await wait_event(self.now, interval_ms / 1000)
                self.now.clear()
        finally:
            if collecting is not None:
                collecting.cancel()

    async def first(self, stop: asyncio.Event) -> bool:
        """Heartbeat until the manager takes one (a stored credential needs no call to
        "connect", so this is the first word with the manager); ``False`` if stopped first."""
        backoff, said = Backoff(0.5, 10.0, jitter=0), ""
        while not stop.is_set():
            try:
                await self._beat()
                return True
            except LinkError as err:
                if err.status in (401, 403, 409) or isinstance(err, VersionMismatch):
                    raise
                if str(err) != said:  # once per cause, not once per retry
                    self.say(f"agent: manager not reachable yet ({err}); retrying")
                    said = str(err)
            await backoff.sleep(stop)
        return False

    async def _beat(self) -> None:
        """One heartbeat, collected and sent now."""
        body = await self._collect()
        await self._send(body)
        self.collector.sent()
        self._last = body

    async def _collect(self) -> Heartbeat:
        """What the node has and runs now."""
        try:
            body = await self.collector.heartbeat()
            await self.runtime.prune_files(keep=set(self.busy))
        except DockerUnavailable as err:
            # Still a heartbeat: the node stays ALIVE while Docker is away, so that sessions
            # a live-restore engine keeps running are not called lost meanwhile.
            body = self.collector.without_engine(explain(err, self.docker_url))
        return body

    async def _send(self, body: Heartbeat) -> None:
        try:
            await self.link.heartbeat(body)
        except LinkError as err:
            if err.status == 401:
                await self.reregister()
            elif err.status == 0 and self._manager_away is None:
                self.say(f"agent: lost the manager ({err}); sessions run on, retrying")
                self._manager_away = str(err)
            raise
        if self._manager_away is not None:
            self.say("agent: the manager answers again")
            self._manager_away = None
