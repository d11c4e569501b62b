"""A cancelled wait ends, even when what it waited for happens in the same loop turn."""

from __future__ import annotations

import asyncio

import pytest

from gpuslice.common.waits import wait_event


async def test_a_cancel_landing_with_the_event_is_not_swallowed() -> None:
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(event, 30))
    await asyncio.sleep(0)  # parked on the event
    event.set()  # both in the same turn: 3.11's asyncio.wait_for returned True here
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_set_in_time_is_true_and_a_timeout_is_false() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True
    assert await wait_event(event, 0) is True  # already set: at once, even with no time left
