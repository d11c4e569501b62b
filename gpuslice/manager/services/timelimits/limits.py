"""What time limit and start a new session gets: the admin's default and maximum applied."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuslice.common.schemas.sessions import SessionCreate
from gpuslice.common.timelimits import format_limit
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.settings import SessionSettings

# A start further ahead than this is almost surely a mistyped date.
MAX_BEGIN_AHEAD = timedelta(days=366)
ENV_TIME_LIMIT = "GPUSLICE_TIME_LIMIT"  # seconds it may run, inside the session


@dataclass(frozen=True, slots=True)
class Bounds:
    default: int | None  # seconds; None: no limit unless asked
    maximum: int | None  # seconds; None: any
    source: str  # names the setting, for the error


def bounds_for(user: UserRow, settings: SessionSettings) -> Bounds:
    """The default and maximum time limit for ``user``'s sessions. Settings-wide today; a
    project's own default and maximum (once sessions run in projects) replace these here."""
    del user  # per-project bounds will be looked up by the session's project
    return Bounds(settings.default_time_limit, settings.max_time_limit,
                  "sessions.max_time_limit")


def time_limit_for(body: SessionCreate, bounds: Bounds) -> int | None:
    """The session's time limit in seconds: its own (at most the maximum), else the default
    (else the maximum). ``InvalidRequest`` ``time_limit_too_long`` beyond the maximum."""
    asked = body.time_limit
    if asked is None:
        if bounds.default is not None and bounds.maximum is not None:
            return min(bounds.default, bounds.maximum)
        return bounds.default if bounds.default is not None else bounds.maximum
    if bounds.maximum is not None and asked > bounds.maximum:
        raise InvalidRequest(
            f"time_limit: {format_limit(asked)} is longer than allowed; at most "
            f"{format_limit(bounds.maximum)} ({bounds.source})",
            field="time_limit", code="time_limit_too_long",
        )
    return asked


def check_begin(begin_at: datetime | None, now: datetime) -> datetime | None:
    """The start asked for (``None``: at once); one more than a year ahead is refused."""
    if begin_at is not None and begin_at - now > MAX_BEGIN_AHEAD:
        raise InvalidRequest(
            "begin_at: more than a year ahead; give a start within the next 366 days",
            field="begin_at", code="begin_too_far",
        )
    return begin_at
