"""History points and how a row of them is packed (pure).

A point is one step of a series (a minute, or an hour once rolled up) as integer sums, so a
rollup (sums added, peaks maxed) and the accounting (the same sums per day) are exact. A
minute's sums are whole multiples of the time they cover (``figure × ms`` with the figure its
average, rounded down, when the minute closes), so a point is stored as its averages plus
remainders that are zero except in rollups. A row holds up to one hour of minute points or one
day of hour points, column by column, each column delta-coded as zigzag varints, then
zlib-compressed: steady figures (an idle session, a constant slice) shrink to almost nothing.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, fields

VERSION = 2
KiB = 1024


@dataclass(frozen=True, slots=True)
class Point:
    """The sums of one step. ``*_ms``: milliseconds with that figure measured; ``*_sum``:
    figure × ms (cpu: milli-cores, mem and gpu_mem: KiB, gpu_util: percent, fgpu: milli-fGPU);
    ``*_max``: the highest sample (KiB). ``slot``: the step's index in its row."""

    slot: int
    covered_ms: int = 0
    fgpu_sum: int = 0
    cpu_ms: int = 0
    cpu_sum: int = 0
    mem_sum: int = 0
    mem_max: int = 0
    gpu_ms: int = 0
    gpu_mem_sum: int = 0
    gpu_mem_max: int = 0
    gpu_util_sum: int = 0

    def merged(self, other: Point, slot: int) -> Point:
        """This point and ``other`` as one (a rollup): sums added, peaks the higher."""
        values = [
            max(a, b) if peak else a + b
            for peak, a, b in zip(_PEAKS[1:], values_of(self)[1:], values_of(other)[1:],
                                  strict=True)
        ]
        return Point(slot, *values)


_NAMES = [f.name for f in fields(Point)]
_PEAKS = [name.endswith("_max") for name in _NAMES]
WIDTH = len(_NAMES)
values_of = operator.attrgetter(*_NAMES)  # a point's fields as a tuple, in order


# Each sum column and the column of milliseconds it is a figure × ms of.
PAIRED = {"fgpu_sum": "covered_ms", "cpu_sum": "cpu_ms", "mem_sum": "covered_ms",
          "gpu_mem_sum": "gpu_ms", "gpu_util_sum": "gpu_ms"}
_PAIRS = [(_NAMES.index(s), _NAMES.index(m)) for s, m in PAIRED.items()]


def quantized(point: Point) -> Point:
    """The point with each sum a whole multiple of its milliseconds (the average, rounded
    down, times the time): how a closed minute is kept."""
    values = list(values_of(point))
    for total, ms in _PAIRS:
        values[total] = values[total] // values[ms] * values[ms] if values[ms] else 0
    return Point(*values)


def encode(points: list[Point]) -> bytes:
    """Pack points (in slot order) into a row's bytes."""
    out = bytearray([VERSION])
    _varint(out, len(points))
    for column in _columns([values_of(p) for p in points]):
        previous = 0
        for value in column:
            _varint(out, _zigzag(value - previous))
            previous = value
    return bytes(out[:1]) + zlib.compress(bytes(out[1:]), 6)


def decode(data: bytes) -> list[Point]:
    """The points of a row, in slot order."""
    if not data or data[0] != VERSION:
        raise ValueError(f"unknown history row format {data[:1]!r}")
    numbers = _varints(zlib.decompress(data[1:]))
    count = next(numbers)
    columns: list[list[int]] = []
    for _ in range(WIDTH + len(_PAIRS)):
        value, column = 0, []
        for _ in range(count):
            value += _unzigzag(next(numbers))
            column.append(value)
        columns.append(column)
    plain = columns[:WIDTH]
    for (total, ms), remainders in zip(_PAIRS, columns[WIDTH:], strict=True):
        plain[total] = [q * m + r for q, m, r in zip(plain[total], plain[ms], remainders,
                                                   strict=True)]
    return [Point(*row) for row in zip(*plain, strict=True)]


def _columns(rows: list[tuple[int, ...]]) -> list[list[int]]:
    """Column by column, each sum as its average (sum // ms), then the remainders."""
    plain = [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * WIDTH
    remainders = []
    for total, ms in _PAIRS:
        averages = [t // m if m else 0 for t, m in zip(plain[total], plain[ms], strict=True)]
        remainders.append([t - a * m for t, a, m in zip(plain[total], averages, plain[ms],
                                                        strict=True)])
        plain[total] = averages
    return plain + remainders


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _varints(data: bytes) -> Iterator[int]:
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            yield value
            value = shift = 0


def appended(data: bytes | None, point: Point) -> bytes:
    """A row with ``point`` added (replacing a point of the same slot, which only a retried
    close could bring)."""
    points = [p for p in decode(data) if p.slot != point.slot] if data else []
    points.append(point)
    points.sort(key=lambda p: p.slot)
    return encode(points)


def rolled_up(points: list[Point], minutes_per_slot: int, base_slot: int) -> dict[int, Point]:
    """Merge points into coarser slots: ``{new slot: point}`` where the new slot is
    ``(base_slot + slot) // minutes_per_slot`` (e.g. the hours of a day from its minutes)."""
    merged: dict[int, Point] = {}
    for point in points:
        slot = (base_slot + point.slot) // minutes_per_slot
        current = merged.get(slot)
        merged[slot] = point.merged(Point(slot), slot) if current is None else current.merged(
            point, slot
        )
    return merged
