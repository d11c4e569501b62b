"""The heartbeat loop never waits on a stuck Docker Engine, not even on its first beat: right
after the node's first heartbeat (``first``), a report that cannot be collected yet is the last
one again, so a node whose engine is busy the moment it joins is not taken for lost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from gpuslice.agent.heartbeats import Heartbeats
from tests.waits import scaled


@dataclass
class _Credential:
    heartbeat_interval_ms: int = 100


@dataclass
class _Link:
    credential: _Credential = field(default_factory=_Credential)
    sent: list[object] = field(default_factory=list)

    async def heartbeat(self, body: object) -> None:
        self.sent.append(body)


@dataclass
class _Collector:
    """Reports ``"report-1"`` once, then hangs as a Docker Engine busy creating containers."""

    stuck: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0

    async def heartbeat(self) -> object:
        self.calls += 1
        if self.calls > 1:
            await self.stuck.wait()
        return f"report-{self.calls}"

    def sent(self) -> None:
        pass


class _Runtime:
    async def prune_files(self, keep: set[str]) -> None:
        pass


async def test_the_first_beats_after_joining_do_not_wait_on_a_stuck_engine() -> None:
    link, collector = _Link(), _Collector()
    beats = Heartbeats(link=cast(Any, link), collector=cast(Any, collector),
                       runtime=cast(Any, _Runtime()), docker_url=None, busy=(),
                       now=asyncio.Event(), say=lambda line: None, reregister=_nothing)
    stop = asyncio.Event()
    assert await beats.first(stop)
    loop = asyncio.create_task(beats.loop(stop))
    try:
        async with asyncio.timeout(scaled(10)):
            while len(link.sent) < 4:
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        collector.stuck.set()
        await loop
    # the engine never answered after the first report: that one went again
    assert set(link.sent) == {"report-1"}, link.sent


async def _nothing() -> None:
    pass
