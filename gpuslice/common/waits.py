"""Waiting for an event with a time limit, in a way that a cancellation always ends.

Python 3.11's ``asyncio.wait_for`` swallows a cancellation that lands in the same loop turn as
the awaited thing completing: the cancelled task carries on as if nothing happened. A loop that
waits this way (a long-poll, an agent's heartbeat) can then outlive the shutdown that cancelled
it. ``asyncio.timeout`` does not have that race, so every wait on an event goes through here.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """True if ``event`` is set within ``timeout`` seconds (at once if it already is)."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(timeout, 0)):
            await event.wait()
    except TimeoutError:
        return False
    return True
