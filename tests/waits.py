"""Waiting in tests: for a state or an event, never for a fixed time, on one timeout scale.

Every bound a test waits within is written for a quiet machine and multiplied by one factor,
``GPUSLICE_TEST_TIMEOUT_SCALE`` (default 1; `make test-loaded` raises it while a CPU hog runs
beside the suite). A bound only limits a failure: a wait returns as soon as its condition
holds, so a generous bound costs a passing test nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _scale() -> float:
    raw = os.environ.get("GPUSLICE_TEST_TIMEOUT_SCALE", "").strip()
    try:
        value = float(raw) if raw else 1.0
    except ValueError:
        raise RuntimeError(
            f"GPUSLICE_TEST_TIMEOUT_SCALE must be a number such as 1 or 2.5, got {raw!r}"
        ) from None
    if not 0.1 <= value <= 100:
        raise RuntimeError(f"GPUSLICE_TEST_TIMEOUT_SCALE must be within 0.1-100, got {raw}")
    return value


SCALE = _scale()


def scaled(seconds: float) -> float:
    """``seconds`` (a bound written for a quiet machine) on this run's timeout scale."""
    return seconds * SCALE


class Deadline:
    """A bound on a wait, on the suite's scale: ``while not deadline.passed: ...``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = scaled(seconds)
        self._end = time.monotonic() + self.seconds

    @property
    def passed(self) -> bool:
        return time.monotonic() > self._end

    @property
    def left(self) -> float:
        return max(0.0, self._end - time.monotonic())


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.1) -> T:
    """Call ``check`` until it returns something other than None or False; that value.
    AssertionError naming ``what`` once ``timeout`` (scaled) has passed."""
    deadline = Deadline(timeout)
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if deadline.passed:
            raise AssertionError(f"{what}: not within {deadline.seconds:.0f}s")
        time.sleep(interval)


async def await_for(check: Callable[[], Awaitable[T | None]], timeout: float, what: str,
                    interval: float = 0.02) -> T:
    """:func:`wait_for` for a coroutine check, without blocking the event loop."""
    deadline = Deadline(timeout)
    while True:
        found = await check()
        if found is not None and found is not False:
            return found
        if deadline.passed:
            raise AssertionError(f"{what}: not within {deadline.seconds:.0f}s")
        await asyncio.sleep(interval)
