"""Time limits and starts as Slurm users write them (`--time`, `--begin`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuslice.common.resources import ResourceError
from gpuslice.common.timelimits import format_limit, parse_begin, parse_time_limit

NOW = datetime(2026, 11, 26, 21, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30m", 1800), ("2h", 7200), ("1d", 86400), ("90s", 90), ("45min", 2700),
    ("90", 5400),  # a bare number is minutes, as in Slurm
    ("5:30", 330), ("1:30:00", 5400), ("1-12", 129600), ("2-03:04", 183840),
    ("2-03:04:05", 183845), (7200, 7200),  # an int is seconds (the API's JSON number)
    ("1h30m", 5400), ("1d2h", 93600), ("2h 30m", 9000), ("1H5M10S", 3910),
])
def test_slurm_forms(text: str | int, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize(("text", "message"), [
    ("soon", "time_limit: 'soon' is not a time limit; use e.g. 30m, 2h, 1d, 90 (minutes) or "
             "1:30:00"),
    ("0", "time_limit: must be between 1 second and 365 days"),
    ("400d", "time_limit: must be between 1 second and 365 days"),
    ("1.5h", "time_limit: '1.5h' is not a time limit; use e.g. 30m, 2h, 1d, 90 (minutes) or "
             "1:30:00"),
])
def test_anything_else_is_one_line_saying_what_is_allowed(text: str, message: str) -> None:
    with pytest.raises(ResourceError) as err:
        parse_time_limit(text)
    assert err.value.message == message


@pytest.mark.parametrize("seconds", [90, 2700, 5400, 86400 + 7200, 3 * 86400 + 61])
def test_what_the_cli_shows_can_be_typed_back(seconds: int) -> None:
    assert parse_time_limit(format_limit(seconds)) == seconds


@pytest.mark.parametrize("text", ["h", "30m2h", "1h1h", "m30"])
def test_units_out_of_order_or_without_a_number_are_refused(text: str) -> None:
    with pytest.raises(ResourceError, match="is not a time limit"):
        parse_time_limit(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("22:00", NOW + timedelta(hours=1)),
    ("20:30", NOW + timedelta(hours=23, minutes=30)),  # passed today: tomorrow
    ("+1h", NOW + timedelta(hours=1)), ("now+30m", NOW + timedelta(minutes=30)),
    ("now + 2:00:00", NOW + timedelta(hours=2)),
    ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),  # no offset: the zone of ``now``
    ("2026-12-01T22:00+01:00", datetime(2026, 12, 1, 22, tzinfo=timezone(timedelta(hours=1)))),
])
def test_starts(text: str, expected: datetime) -> None:
    assert parse_begin(text, NOW) == expected


def test_a_clock_time_is_read_in_the_zone_it_is_given() -> None:
    paris = timezone(timedelta(hours=1))  # 21:00 UTC is 22:00 there
    at = parse_begin("23:00", NOW.astimezone(paris))
    assert at == datetime(2026, 11, 26, 23, tzinfo=paris) == NOW + timedelta(hours=1)


@pytest.mark.parametrize("text", ["tomorrow", "25:00", "22:61", "+soon"])
def test_a_bad_start_is_refused(text: str) -> None:
    with pytest.raises(ResourceError, match="begin: "):
        parse_begin(text, NOW)


def test_limits_are_written_short() -> None:
    assert [format_limit(s) for s in (90, 1800, 5400, 90000)] == ["1m30s", "30m", "1h30m",
                                                                   "1d1h"]
