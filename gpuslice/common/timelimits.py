"""Time limits and scheduled starts as Slurm users write them (``--time``, ``--begin``).

Plain module (no pydantic), so CLI commands can use it without importing the schemas.

- A time limit: ``30m``, ``2h``, ``1d``, ``90s``, or several units (``1h30m``, as
  :func:`format_limit` shows one); or Slurm's ``MM``, ``MM:SS``, ``HH:MM:SS``,
  ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (a bare number is minutes, as in Slurm).
- A start: ``22:00`` (the next such time, today or tomorrow), ``+1h`` / ``now+90m``, or an ISO
  date (``2026-12-01``, ``2026-12-01T22:00``, with an offset or in the local time zone).
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta

from gpuslice.common.resources import ResourceError

MAX_TIME_LIMIT = 365 * 86400
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# One unit or several, largest first: 30m, 2h, 1h30m, 1d2h, "2h 30m" (as format_limit shows
# a limit, so what the CLI shows can be typed back).
_SUFFIXED = re.compile(r"^(?:(\d+)\s*d\s*)?(?:(\d+)\s*h\s*)?(?:(\d+)\s*(?:min|m)\s*)?"
                       r"(?:(\d+)\s*s)?$", re.I)
_SLURM = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_TIME_HELP = "use e.g. 30m, 2h, 1d, 90 (minutes) or 1:30:00"
_BEGIN_HELP = "use e.g. 22:00, +1h, now+30m or an ISO date such as 2026-12-01T22:00"


def parse_time_limit(value: object, *, field: str = "time_limit") -> int:
    """Whole seconds from a time limit as written above (an int is already seconds)."""
    if isinstance(value, bool) or value is None:
        raise ResourceError(field, f"{field}: expected a time limit; {_TIME_HELP}")
    seconds = value if isinstance(value, int) else _seconds(str(value).strip(), field)
    if not 1 <= seconds <= MAX_TIME_LIMIT:
        raise ResourceError(field, f"{field}: must be between 1 second and 365 days")
    return seconds


def parse_begin(value: str, now: datetime, *, field: str = "begin") -> datetime:
    """The moment a start written as above means, seen at ``now`` (aware: its time zone is
    the one a clock time or a date without an offset is read in)."""
    text = value.strip()
    relative = text.removeprefix("now").strip()
    if relative.startswith("+"):
        return now + timedelta(seconds=parse_time_limit(relative[1:].strip(), field=field))
    clock = _CLOCK.match(text)
    if clock:
        hour, minute, second = (int(g or 0) for g in clock.groups())
        if hour > 23 or minute > 59 or second > 59:
            raise ResourceError(field, f"{field}: {value!r} is not a time of day; {_BEGIN_HELP}")
        at = datetime.combine(now.date(), time(hour, minute, second), now.tzinfo)
        return at if at > now else at + timedelta(days=1)
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ResourceError(
            field, f"{field}: {value!r} is not a start time; {_BEGIN_HELP}"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=now.tzinfo)


def format_limit(seconds: int) -> str:
    """``2h``, ``1h30m``, ``45m``, ``1d2h``, ``90s``: short, as it was most likely typed."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts) or "0s"


def _seconds(text: str, field: str) -> int:
    match = _SUFFIXED.match(text)
    if match and any(match.groups()):
        d, h, m, s = (int(g or 0) for g in match.groups())
        return d * 86400 + h * 3600 + m * 60 + s
    match = _SLURM.match(text)
    if not match:
        raise ResourceError(field, f"{field}: {text!r} is not a time limit; {_TIME_HELP}")
    days, *rest = match.groups()
    parts = [int(p) for p in rest if p is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, secs = (parts + [0, 0])[:3]
        return int(days) * 86400 + hours * 3600 + minutes * 60 + secs
    if len(parts) == 3:
        hours, minutes, secs = parts
        return hours * 3600 + minutes * 60 + secs
    minutes, secs = (parts + [0])[:2]  # MM or MM:SS
    return minutes * 60 + secs
