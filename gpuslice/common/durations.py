"""Durations people type and read: ``90``, ``90s``, ``30m``, ``2h``, ``7d`` ↔ whole seconds.

Plain module (no pydantic), so CLI commands can use it without importing the schemas.
"""

from __future__ import annotations

import re

from gpuslice.common.resources import ResourceError

_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"^\s*(?P<num>\d+)\s*(?P<unit>s|min|m|h|d|w)?\s*$", re.I)
MAX_DURATION = 10 * 365 * 86400


def parse_duration(value: object, *, field: str, minimum: int = 0) -> int:
    """Whole seconds from ``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"7d"``, ``"1w"``."""
    if isinstance(value, bool):
        raise ResourceError(field, f"{field}: expected a duration such as 30m, got {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION_RE.match(str(value))
        if not match:
            raise ResourceError(
                field, f"{field}: {value!r} is not a duration; use e.g. 90s, 30m, 2h or 7d"
            )
        seconds = int(match["num"]) * _UNITS[(match["unit"] or "").lower()]
    if not minimum <= seconds <= MAX_DURATION:
        raise ResourceError(
            field, f"{field}: must be between {format_duration(minimum)} and 10 years"
        )
    return seconds


def format_duration(seconds: int) -> str:
    """``45 s``, ``30 min``, ``2 h``, ``2 h 30 min``, ``3 d 4 h``: the two largest units."""
    if seconds < 60:
        return f"{seconds} s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
        if len(parts) == 2 or (parts and seconds == 0):
            break
    return " ".join(parts)
