"""``--time`` and ``--begin`` as the CLI reads them, and a session's time as lists show it.

A clock time or a date without an offset (``--begin 22:00``) is read in this machine's time
zone and sent with its offset, so the manager starts it at the moment the user meant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpuslice.cli.output import CliError
from gpuslice.common.durations import format_duration
from gpuslice.common.resources import ResourceError
from gpuslice.common.timelimits import format_limit, parse_begin, parse_time_limit

if TYPE_CHECKING:
    from gpuslice.common.schemas.sessions import SessionPublic

TIME_HELP = ("Time limit: 30m, 2h, 1d, 1:30:00 or minutes (90), as in Slurm; it is ended then, "
             "after a warning signal (SIGUSR1) a few minutes before. Inside: GPUSLICE_TIME_LIMIT "
             "(seconds).")
BEGIN_HELP = "Start no sooner than this: 22:00 (next), +1h, now+30m or 2026-12-01T22:00."


def time_option(value: str | None) -> int | None:
    """``--time`` in seconds (None: not given); exit code 2 with what is allowed otherwise."""
    if value is None:
        return None
    try:
        return parse_time_limit(value, field="--time")
    except ResourceError as err:
        raise CliError(err.message, 2) from None


def begin_option(value: str | None) -> str | None:
    """``--begin`` as an ISO 8601 moment with its offset (None: not given)."""
    if value is None:
        return None
    try:
        return parse_begin(value, datetime.now().astimezone(), field="--begin").isoformat()
    except ResourceError as err:
        raise CliError(err.message, 2) from None


def time_column(s: SessionPublic) -> str:
    """``1h20m left``, ``starts 22:00``, ``limit 2h``, or nothing."""
    now = datetime.now(UTC)
    if s.ends_at is not None:
        left = int((s.ends_at - now).total_seconds())
        return f"{format_limit(left)} left" if left > 0 else "ending"
    if s.begin_at is not None and s.begin_at > now and s.status.value == "PENDING":
        local = s.begin_at.astimezone()
        day = "" if local.date() == datetime.now().date() else f"{local:%Y-%m-%d} "
        return f"starts {day}{local:%H:%M}"
    return f"limit {format_limit(s.time_limit)}" if s.time_limit else ""


def time_lines(s: SessionPublic) -> list[tuple[str, str]]:
    """``gpuslice session show``'s lines on its time limit and start."""
    lines = []
    if s.time_limit:
        lines.append(("time limit", format_limit(s.time_limit)))
    if s.ends_at is not None:
        left = max(0, int((s.ends_at - datetime.now(UTC)).total_seconds()))
        lines.append(("ends", f"{s.ends_at.astimezone():%Y-%m-%d %H:%M:%S %Z} "
                              f"(in {format_duration(left)})"))
    if s.begin_at is not None:
        lines.append(("begins", f"{s.begin_at.astimezone():%Y-%m-%d %H:%M:%S %Z}"))
    return lines
