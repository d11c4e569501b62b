"""Idle rules, decided (pure): unknown is never idle, AND/OR, grace, lifetime, batch sessions and
resources a session does not have."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpuslice.common.schemas.monitoring import IdleRule
from gpuslice.manager.services.monitoring.idle import Observed, decide

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GAP = timedelta(seconds=30)
MIN = timedelta(minutes=1)


def seen(**kw: object) -> Observed:
    base = Observed(
        now=NOW, running_since=NOW - 120 * MIN, batch=False, has_gpu=True,
        last_sample_at=NOW - timedelta(seconds=5), gpu_idle_since=None, cpu_idle_since=None,
        last_activity_at=None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


GPU_30 = IdleRule(window=1800, gpu_util=1)
BOTH = IdleRule(window=1800, gpu_util=1, activity=True)


def test_idle_gpu_for_the_window_is_due_with_the_reason() -> None:
    found = decide(GPU_30, None, seen(gpu_idle_since=NOW - 31 * MIN), GAP)
    assert found is not None and found.due(NOW) and found.kind == "idle"
    assert found.at == NOW - MIN
    assert found.reason == "idle for 30 min: GPU util < 1 %"


def test_a_countdown_before_it_is_due() -> None:
    found = decide(GPU_30, None, seen(gpu_idle_since=NOW - 10 * MIN), GAP)
    assert found is not None and not found.due(NOW) and found.at == NOW + 20 * MIN


@pytest.mark.parametrize("case", [
    {"gpu_idle_since": None},  # busy, or its GPU figures are missing (unknown)
    {"gpu_idle_since": NOW - 60 * MIN, "last_sample_at": NOW - 5 * MIN},  # node silent: unknown
    {"gpu_idle_since": NOW - 60 * MIN, "last_sample_at": None},  # never measured
])
def test_unknown_or_busy_is_never_idle(case: dict[str, object]) -> None:
    assert decide(GPU_30, None, seen(**case), GAP) is None


def test_all_needs_every_criterion_known_and_idle() -> None:
    gpu_only = seen(gpu_idle_since=NOW - 60 * MIN)  # activity never seen: unknown
    assert decide(BOTH, None, gpu_only, GAP) is None
    both = replace(gpu_only, last_activity_at=NOW - 40 * MIN)
    found = decide(BOTH, None, both, GAP)
    assert found is not None and found.at == NOW - 10 * MIN  # from the later of the two
    assert found.reason == "idle for 30 min: GPU util < 1 %, no terminal or app activity"


def test_any_needs_one_idle_criterion() -> None:
    rule = BOTH.model_copy(update={"combine": "any"})
    found = decide(rule, None, seen(gpu_idle_since=NOW - 45 * MIN), GAP)
    assert found is not None and found.at == NOW - 15 * MIN
    assert found.reason == "idle for 30 min: GPU util < 1 %"


def test_resources_a_session_lacks_and_batch_activity_are_left_out() -> None:
    cpu_and_gpu = IdleRule(window=600, gpu_util=5, cpu_util=10)
    cpu_only = seen(has_gpu=False, cpu_idle_since=NOW - 11 * MIN)
    found = decide(cpu_and_gpu, None, cpu_only, GAP)
    assert found is not None and found.reason == "idle for 10 min: CPU < 10 % of its allocation"
    batch = seen(batch=True, gpu_idle_since=NOW - 31 * MIN)  # activity does not apply to it
    assert decide(BOTH, None, batch, GAP) is not None
    only_activity = IdleRule(window=60, activity=True)
    assert decide(only_activity, None, replace(batch, last_activity_at=NOW - 9 * MIN),
                  GAP) is None


def test_grace_after_start_and_the_lifetime_limit() -> None:
    started = seen(running_since=NOW - 5 * MIN, gpu_idle_since=NOW - 5 * MIN)
    rule = IdleRule(window=60, grace=600, gpu_util=1)
    found = decide(rule, None, started, GAP)
    assert found is not None and found.at == NOW + 5 * MIN  # not before the grace is over
    lifetime = decide(None, 3600, seen(), GAP)
    assert lifetime is not None and lifetime.at == NOW - 60 * MIN
    assert lifetime.reason == "reached the maximum session lifetime of 1 h"
    sooner = decide(GPU_30, 8 * 3600, seen(gpu_idle_since=NOW - 20 * MIN), GAP)
    assert sooner is not None and sooner.kind == "idle"  # the earlier of the two


def test_a_rule_needs_a_criterion_and_sane_numbers() -> None:
    with pytest.raises(ValidationError, match="at least one criterion"):
        IdleRule(window=60)
    with pytest.raises(ValidationError):
        IdleRule(window=0, gpu_util=1)
    with pytest.raises(ValidationError):
        IdleRule(window=60, gpu_util=101)
