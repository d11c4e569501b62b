"""Supervised background loops: a failure is logged and the loop goes on (with backoff).

Each loop keeps a `LoopState` (when it last went round, its failures in a row): the readiness
check (`services/health.py`) reads it to tell a load balancer whether this replica schedules.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpuslice.common.backoff import doubled
from gpuslice.common.waits import wait_event
from gpuslice.manager.db.faults import describe

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0
# A loop that has not gone round for this many intervals (and at least STALE_MIN_S) is stuck.
STALE_INTERVALS = 3
STALE_MIN_S = 30.0


@dataclass(slots=True)
class LoopState:
    """What a loop last did, in monotonic seconds; written only by its own task."""

    name: str
    interval: float
    beat: float = field(default_factory=time.monotonic)  # the last pass began or ended
    passes: int = 0
    failures: int = 0  # in a row
    last_error: str = ""  # the exception's type: the readiness answer is public (its text,
    # with a statement's parameters, goes to the log only)

    def problem(self, now: float | None = None) -> str | None:
        """Why this loop is not healthy, or None."""
        now = time.monotonic() if now is None else now
        stale_after = max(self.interval * STALE_INTERVALS, STALE_MIN_S)
        if now - self.beat > stale_after:
            return f"{self.name} has not run for {now - self.beat:.0f} s"
        if self.failures >= STALE_INTERVALS:
            return (f"{self.name} failed {self.failures} times in a row ({self.last_error}; "
                    "the manager's log says why)")
        return None


async def supervise(
    name: str,
    body: Callable[[], Awaitable[object]],
    *,
    interval: float,
    wake: asyncio.Event | None = None,
    jitter: float = 0.1,
    state: LoopState | None = None,
    database_url: str | None = None,
) -> None:
    """Run ``body`` now, then again whenever ``wake`` is set or ``interval`` (± jitter) passes.

    A failure of the database the loop can name (``database_url``: it is down, locked, full)
    is one line when it begins and one when it ends, not a traceback per pass."""
    state = state or LoopState(name, interval)
    fault: str | None = None
    while True:
        if wake is not None:
            wake.clear()  # before the pass: a wake-up during the pass triggers the next one
        state.beat = time.monotonic()
        try:
            await body()
            state.failures, state.passes = 0, state.passes + 1
            if fault is not None:
                log.warning("%s: the database answers again", name)
                fault = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            state.failures += 1
            state.last_error = type(exc).__name__
            said = describe(exc, database_url) if database_url else None
            if said is None:
                log.exception("%s failed (%d in a row); retrying", name, state.failures)
            elif said != fault:
                log.warning("%s: %s (retrying)", name, said)
            fault = said or fault
        state.beat = time.monotonic()
        delay = interval * (1 + random.uniform(-jitter, jitter))
        if state.failures:
            delay = doubled(max(delay, 0.1), state.failures, MAX_BACKOFF_S)
        await _sleep(delay, wake)


async def _sleep(delay: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(delay)
        return
    await wait_event(wake, delay)
