"""Waiting longer after each failure: delays that double up to a ceiling, with jitter.

Every retry in the package follows this one rule: ``initial``, twice that, four times, ... at
most ``maximum``, each delay drawn within ``± jitter`` of its value (so that many agents or
replicas that failed together do not retry together). ``Backoff`` keeps the count for a retry
loop; ``doubled`` is the rule alone, for a loop that counts its failures itself.
"""

from __future__ import annotations

import asyncio
import random

from gpuslice.common.waits import wait_event


def doubled(delay: float, times: int, maximum: float) -> float:
    """``delay`` doubled ``times`` times, at most ``maximum``."""
    return min(delay * 2 ** min(times, 32), maximum)


class Backoff:
    """Delays for a retry loop: ``next()`` (or ``sleep()``) after each failure, ``reset()`` once
    it succeeds. ``jitter``: the fraction a delay may stray by (0: exact delays)."""

    def __init__(self, initial: float = 0.2, maximum: float = 5.0, *,
                 jitter: float = 0.2) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    def next(self) -> float:
        """The delay before the next try, and one more failure counted."""
        delay = doubled(self.initial, self.failures, self.maximum)
        self.failures += 1
        if self.jitter:
            delay *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return delay

    async def sleep(self, stop: asyncio.Event | None = None) -> None:
        """Wait the next delay, or until ``stop`` is set."""
        delay = self.next()
        if stop is None:
            await asyncio.sleep(delay)
        else:
            await wait_event(stop, delay)
