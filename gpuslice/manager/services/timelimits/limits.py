"""What time limit and start a new session gets: the admin's default and maximum applied."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuslice.common.schemas.sessions import SessionCreate
from gpuslice.common.timelimits import format_limit
from gpuslice.manager.db.models import ProjectRow
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


def bounds_for(project: ProjectRow, settings: SessionSettings) -> Bounds:
    """The default and maximum time limit for sessions in ``project``: its own default if it
    has one, else the settings'; of the two maxima the smaller (both hold), named in the error.
    """
    default = (project.default_time_limit if project.default_time_limit is not None
               else settings.default_time_limit)
    theirs, ours = project.max_time_limit, settings.max_time_limit
    if theirs is not None and (ours is None or theirs <= ours):
        return Bounds(default, theirs, f"the maximum of project {project.name}")
    return Bounds(default, ours, "sessions.max_time_limit")


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
