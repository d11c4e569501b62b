"""Supervised background loops: a failure is logged and the loop goes on (with backoff)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0


async def supervise(
    name: str,
    body: Callable[[], Awaitable[object]],
    *,
    interval: float,
    wake: asyncio.Event | None = None,
    jitter: float = 0.1,
) -> None:
    """Run ``body`` now, then again whenever ``wake`` is set or ``interval`` (± jitter) passes."""
    failures = 0
    while True:
        if wake is not None:
            wake.clear()  # before the pass: a wake-up during the pass triggers the next one
        try:
            await body()
            failures = 0
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            log.exception("%s failed (%d in a row); retrying", name, failures)
        delay = interval * (1 + random.uniform(-jitter, jitter))
        if failures:
            delay = min(max(delay, 0.1) * 2 ** min(failures, 10), MAX_BACKOFF_S)
        await _sleep(delay, wake)


async def _sleep(delay: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(delay)
        return
    try:
        await asyncio.wait_for(wake.wait(), delay)
    except TimeoutError:
        pass
