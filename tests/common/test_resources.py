from decimal import Decimal

import pytest

from gpuslice.common.resources import (
    GiB,
    MiB,
    ResourceError,
    Resources,
    format_fgpu,
    format_mem,
    parse_cpu,
    parse_fgpu,
    parse_fgpu_per_gpu,
    parse_mem,
    slice_fraction,
    slice_share,
    sm_percent,
)


@pytest.mark.parametrize(
    ("value", "milli"),
    [(0.5, 500), (2, 2000), ("1.25", 1250), ("0", 0), (Decimal("0.01"), 10), (0.1, 100),
     (" 3 ", 3000), (0.3, 300)],
)
def test_parse_fgpu_accepts_exact_amounts(value, milli):
    assert parse_fgpu(value) == milli


@pytest.mark.parametrize(
    ("value", "fragment"),
    [(-1, "zero or more"), ("abc", "not a number"), (0.333, "more than 2 decimal"),
     ("nan", "not a finite"), (float("inf"), "not a finite"), ("1e9", "maximum"),
     (True, "expected"), (None, "expected"), ("", "not a number")],
)
def test_parse_fgpu_rejects_with_a_clear_message(value, fragment):
    with pytest.raises(ResourceError) as err:
        parse_fgpu(value)
    assert fragment in err.value.message
    assert err.value.field == "gpu"


def test_parse_cpu_needs_a_positive_amount_with_three_decimals_at_most():
    assert parse_cpu("0.5") == 500
    assert parse_cpu(4) == 4000
    for bad in (0, -2, "0.0001", "x", "inf"):
        with pytest.raises(ResourceError):
            parse_cpu(bad)


@pytest.mark.parametrize(
    ("value", "size"),
    [("512m", 512 * MiB), ("2g", 2 * GiB), ("2GiB", 2 * GiB), ("1.5G", 3 * GiB // 2),
     ("2GB", 2 * GiB), (1048576, MiB), ("1048576", MiB), ("4 GiB", 4 * GiB), ("1t", 1024 * GiB)],
)
def test_parse_mem_units_are_binary(value, size):
    assert parse_mem(value) == size


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("5q", "not a size; write"), ("-1g", "not a size; write"), ("0", "positive"),
     ("1e3g", "not a size; write"), ("999999t", "maximum"), ("g", "not a size; write"),
     (True, "expected"), ([1], "expected")],
)
def test_parse_mem_rejects_garbage_and_absurd_sizes(value, fragment):
    with pytest.raises(ResourceError) as err:
        parse_mem(value)
    assert fragment in err.value.message


def test_parse_mem_minimum_hints_at_units_for_plain_numbers():
    with pytest.raises(ResourceError) as err:
        parse_mem("512", minimum=6 * MiB)
    assert "did you mean a unit" in err.value.message


def test_fgpu_per_gpu_gives_device_capacity():
    assert parse_fgpu_per_gpu(2) == 2000
    with pytest.raises(ResourceError):
        parse_fgpu_per_gpu(0)


def test_users_doc_example_half_fgpu_of_8gib_gpu_with_two_fgpu_per_gpu_gets_2gib():
    assert slice_share(8 * GiB, parse_fgpu("0.5"), parse_fgpu_per_gpu(2)) == 2 * GiB
    assert slice_share(108, 500, 2000) == 27


def test_slice_share_rounds_down():
    assert slice_share(10, 1000, 3000) == 3


def test_formatting():
    assert format_fgpu(2000) == "2.0"
    assert format_fgpu(250) == "0.25"
    assert format_fgpu(0) == "0.0"
    assert format_mem(8 * GiB) == "8 GiB"
    assert format_mem(3 * GiB // 2) == "1.5 GiB"
    assert format_mem(100) == "100 B"
    assert Resources(1, 2, 3) + Resources(1, 1, 1) - Resources(2, 3, 4) == Resources()


def test_slice_fraction_is_exact_where_it_can_be_and_never_more_than_the_slice():
    assert slice_fraction(250, 2000) == Decimal("0.125")
    assert slice_fraction(1000, 1000) == Decimal(1)
    assert slice_fraction(1000, 3000) == Decimal("0.3333")  # rounded down, never up
    assert slice_fraction(2000, 3000) == Decimal("0.6666")
    assert slice_fraction(10, 100_000) == Decimal("0.0001")  # the smallest slice there is
    assert str(slice_fraction(500, 1000)) == "0.5"  # no trailing zeros on the wire
    with pytest.raises(ValueError):
        slice_fraction(500, 0)


def test_sm_percent_rounds_down_but_any_slice_gets_one():
    assert sm_percent(500, 1000) == 50
    assert sm_percent(1000, 3000) == 33
    assert sm_percent(10, 100_000) == 1
    assert sm_percent(0, 1000) == 0
