"""The one backoff rule: doubling delays up to a ceiling, with jitter, reset on success."""

from __future__ import annotations

import asyncio

import pytest

from gpuslice.common.backoff import Backoff, doubled
from tests.waits import scaled


def test_delays_double_up_to_the_ceiling_and_start_again_after_a_reset() -> None:
    backoff = Backoff(0.5, 3.0, jitter=0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_jitter_keeps_each_delay_within_its_fraction() -> None:
    backoff = Backoff(1.0, 4.0, jitter=0.2)
    for expected in (1.0, 2.0, 4.0, 4.0):
        assert expected * 0.8 <= backoff.next() <= expected * 1.2


def test_the_rule_alone() -> None:
    assert doubled(0.1, 0, 60.0) == 0.1
    assert doubled(0.1, 3, 60.0) == pytest.approx(0.8)
    assert doubled(0.1, 10_000, 60.0) == 60.0  # no overflow however many failures


async def test_a_stop_ends_the_wait_at_once() -> None:
    stop = asyncio.Event()
    stop.set()
    async with asyncio.timeout(scaled(5)):  # at once: not the 30 s (or more) of the backoff
        await Backoff(30.0, 60.0).sleep(stop)
