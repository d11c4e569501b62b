"""Supervised background loops: a failure is logged and the loop goes on (with backoff).

What the manager's loops are is one table, `loop_table.py`; this module runs them. Each `Loop`
keeps a `LoopState` (when it last went round, its failures in a row, the last error's type):
the health endpoints (`services/health.py`) and `/metrics` read it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuslice.common.backoff import doubled
from gpuslice.common.waits import wait_event
from gpuslice.manager.db.faults import describe

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0
# A loop that has not gone round for this many intervals (and at least STALE_MIN_S) is stuck;
# one that failed this many passes in a row is failing.
STALE_INTERVALS = 3
STALE_MIN_S = 30.0

Pass = Callable[[], Awaitable[object]]


@dataclass(slots=True)
class LoopState:
    """What a loop last did: monotonic seconds for judging it, the wall clock for people."""

    name: str
    interval: float
    running: bool = False  # started with the app; a loop left off runs only when asked
    beat: float = field(default_factory=time.monotonic)  # the last pass began or ended
    passes: int = 0  # that succeeded
    failures: int = 0  # in a row
    last_error: str = ""  # the last failure's exception type, kept after a recovery: the
    # health answers are public (its text, with a statement's parameters, goes to the log only)
    last_pass_at: datetime | None = None  # when the last pass ended, either way

    def problem(self, now: float | None = None) -> str | None:
        """Why this loop is not healthy, or None."""
        now = time.monotonic() if now is None else now
        stale_after = max(self.interval * STALE_INTERVALS, STALE_MIN_S)
        if self.running and now - self.beat > stale_after:
            return f"{self.name} has not run for {now - self.beat:.0f} s"
        if self.failures >= STALE_INTERVALS:
            return (f"{self.name} failed {self.failures} times in a row ({self.last_error}; "
                    "the manager's log says why)")
        return None

    def detail(self, now: float | None = None) -> str:
        """The problem, or what the loop did last."""
        now = time.monotonic() if now is None else now
        if (problem := self.problem(now)) is not None:
            return problem
        if not self.running:
            return f"left off ({self.passes} passes run when asked)"
        return f"ran {now - self.beat:.1f} s ago ({self.passes} passes)"


@dataclass(slots=True)
class Loop:
    """One loop as built for an app: its pass, how often it runs, its health."""

    name: str  # in the log and the task's name; its key (`node sweep`: `node_sweep`) elsewhere
    body: Pass
    interval: float
    wake: asyncio.Event | None = None  # also run at once when this is set
    jitter: float = 0.1
    gates_readiness: bool = False
    state: LoopState = field(init=False)

    def __post_init__(self) -> None:
        self.state = LoopState(self.name, self.interval)

    @property
    def key(self) -> str:
        return key_of(self.name)

    async def pass_once(self) -> None:
        """One pass, its outcome recorded in ``state`` as the loop records it; what the pass
        raised is raised (the loop logs it and goes on)."""
        state = self.state
        state.beat = time.monotonic()
        try:
            await self.body()
        except Exception as exc:
            state.failures += 1
            state.last_error = type(exc).__name__
            raise
        else:
            state.failures, state.passes = 0, state.passes + 1
        finally:
            state.beat, state.last_pass_at = time.monotonic(), datetime.now(UTC)


def key_of(name: str) -> str:
    return name.replace(" ", "_")


class Loops(Mapping[str, Loop]):
    """An app's loops by key, started and stopped together by its lifespan."""

    def __init__(self, loops: Iterable[Loop], database_url: str | None = None) -> None:
        self._loops = {loop.key: loop for loop in loops}
        self._database_url = database_url
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, off: Collection[str] = ()) -> None:
        """Start every loop but those named in ``off``, in the table's order."""
        for key, loop in self._loops.items():
            if key not in off:
                loop.state.running = True
                self._tasks.append(asyncio.create_task(
                    supervise(loop, self._database_url), name=f"gpuslice-{key.replace('_', '-')}"
                ))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def __getitem__(self, key: str) -> Loop:
        return self._loops[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loops)

    def __len__(self) -> int:
        return len(self._loops)


async def supervise(loop: Loop, database_url: str | None = None) -> None:
    """Run ``loop``'s pass now, then again whenever its ``wake`` is set or its interval
    (± jitter) passes; after failures, later (doubling, at most ``MAX_BACKOFF_S``).

    A failure of the database the loop can name (``database_url``: it is down, locked, full)
    is one line when it begins and one when it ends, not a traceback per pass."""
    fault: str | None = None
    while True:
        if loop.wake is not None:
            loop.wake.clear()  # before the pass: a wake-up during the pass triggers the next one
        try:
            await loop.pass_once()
            if fault is not None:
                log.warning("%s: the database answers again", loop.name)
                fault = None
        except Exception as exc:
            said = describe(exc, database_url) if database_url else None
            if said is None:
                log.exception("%s failed (%d in a row); retrying", loop.name, loop.state.failures)
            elif said != fault:
                log.warning("%s: %s (retrying)", loop.name, said)
            fault = said or fault
        delay = loop.interval * (1 + random.uniform(-loop.jitter, loop.jitter))
        if loop.state.failures:
            delay = doubled(max(delay, 0.1), loop.state.failures, MAX_BACKOFF_S)
        await _sleep(delay, loop.wake)


async def _sleep(delay: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(delay)
        return
    await wait_event(wake, delay)
