"""When a session will be reclaimed: its owner's idle rule and lifetime limit (pure).

Each criterion of the rule is, for one session at one moment, *idle since* some time, *busy*,
or *unknown*; criteria for resources the session lacks (a GPU rule on a CPU-only session) or
that do not apply (activity, for batch sessions) are left out. Unknown is never idle: a GPU
criterion is unknown when the session's GPU figures are missing, and every measured criterion
is unknown when its node has not reported for longer than the node timeout. Activity (terminal
and app traffic, ``sessions.last_activity_at``) is unknown until some has been seen.

- ``all``: idle once every criterion left is known and idle, from the latest of their starts.
- ``any``: idle once one criterion is, from the earliest.

Either way the session is reclaimed ``window`` after that, and never before ``grace`` after it
started running. The lifetime limit counts from the start too; the earlier of the two wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from gpuslice.common.durations import format_duration
from gpuslice.common.schemas.monitoring import IdleRule


@dataclass(frozen=True, slots=True)
class Observed:
    """What is known of one RUNNING session now."""

    now: datetime
    running_since: datetime
    batch: bool
    has_gpu: bool
    last_sample_at: datetime | None  # None: never measured
    gpu_idle_since: datetime | None
    cpu_idle_since: datetime | None
    last_activity_at: datetime | None


@dataclass(frozen=True, slots=True)
class Reclaim:
    """The session is reclaimed at ``at`` (due once ``at`` has passed) with ``reason``."""

    at: datetime
    kind: Literal["idle", "lifetime"]
    reason: str

    def due(self, now: datetime) -> bool:
        return self.at <= now


@dataclass(frozen=True, slots=True)
class _Criterion:
    since: datetime | None  # None: busy or unknown
    says: str


def decide(
    rule: IdleRule | None, max_lifetime: int | None, seen: Observed, max_gap: timedelta
) -> Reclaim | None:
    """When (and why) the session will be reclaimed if it goes on as it is; ``None``: never."""
    found = [r for r in (_idle(rule, seen, max_gap), _lifetime(max_lifetime, seen)) if r]
    return min(found, key=lambda r: r.at) if found else None


def criteria(rule: IdleRule, seen: Observed, max_gap: timedelta) -> list[_Criterion]:
    """The criteria that apply to this session, each idle since when (``None``: not idle)."""
    fresh = seen.last_sample_at is not None and seen.now - seen.last_sample_at <= max_gap
    found = []
    if rule.gpu_util is not None and seen.has_gpu:
        found.append(_Criterion(seen.gpu_idle_since if fresh else None,
                                f"GPU util < {rule.gpu_util} %"))
    if rule.cpu_util is not None:
        found.append(_Criterion(seen.cpu_idle_since if fresh else None,
                                f"CPU < {rule.cpu_util} % of its allocation"))
    if rule.activity and not seen.batch:
        found.append(_Criterion(seen.last_activity_at, "no terminal or app activity"))
    return found


def _idle(rule: IdleRule | None, seen: Observed, max_gap: timedelta) -> Reclaim | None:
    if rule is None:
        return None
    applying = criteria(rule, seen, max_gap)
    idle = [c for c in applying if c.since is not None]
    if not idle or (rule.combine == "all" and len(idle) < len(applying)):
        return None
    window = timedelta(seconds=rule.window)
    if rule.combine == "all":
        start = max(c.since for c in idle if c.since is not None)
        says = [c.says for c in idle]
    else:
        start = min(c.since for c in idle if c.since is not None)
        says = [c.says for c in idle if c.since is not None and c.since + window <= max(
            start + window, seen.now)]
    at = max(start + window, seen.running_since + timedelta(seconds=rule.grace))
    return Reclaim(at, "idle", f"idle for {format_duration(rule.window)}: {', '.join(says)}")


def _lifetime(max_lifetime: int | None, seen: Observed) -> Reclaim | None:
    if max_lifetime is None:
        return None
    return Reclaim(seen.running_since + timedelta(seconds=max_lifetime), "lifetime",
                   f"reached the maximum session lifetime of {format_duration(max_lifetime)}")
