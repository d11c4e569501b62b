"""Supervised background loops: a failure is logged and the loop goes on (with backoff)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from gpuslice.manager.db.faults import describe

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0


async def supervise(
    name: str,
    body: Callable[[], Awaitable[object]],
    *,
    interval: float,
    wake: asyncio.Event | None = None,
    jitter: float = 0.1,
    database_url: str | None = None,
) -> None:
    """Run ``body`` now, then again whenever ``wake`` is set or ``interval`` (± jitter) passes.

    A failure of the database the loop can name (``database_url``: it is down, locked, full)
    is one line when it begins and one when it ends, not a traceback per pass."""
    failures = 0
    fault: str | None = None
    while True:
        if wake is not None:
            wake.clear()  # before the pass: a wake-up during the pass triggers the next one
        try:
            await body()
            failures = 0
            if fault is not None:
                log.warning("%s: the database answers again", name)
                fault = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            said = describe(exc, database_url) if database_url else None
            if said is None:
                log.exception("%s failed (%d in a row); retrying", name, failures)
            elif said != fault:
                log.warning("%s: %s (retrying)", name, said)
            fault = said or fault
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
