"""History points and how a row of them is packed (pure).

A point is the sums of one step of a series (a minute, or an hour once rolled up): integers
only, so a rollup (sums added, peaks maxed) and the accounting (the same sums per day) are
exact. A row holds up to one hour of minute points or one day of hour points, packed column by
column as 64-bit integers, each column delta-coded, then zlib-compressed: steady figures (an
idle session, a constant slice) shrink to almost nothing.
"""

from __future__ import annotations

import operator
import sys
import zlib
from array import array
from dataclasses import dataclass, fields

VERSION = 1
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


def encode(points: list[Point]) -> bytes:
    """Pack points (in slot order) into a row's bytes."""
    rows = [values_of(point) for point in points]
    columns = array("q")
    for index in range(WIDTH):
        previous = 0
        for row in rows:
            value = row[index]
            columns.append(value - previous)
            previous = value
    if sys.byteorder == "big":
        columns.byteswap()
    return bytes([VERSION, len(points) & 0xFF, len(points) >> 8]) + zlib.compress(
        columns.tobytes(), 6
    )


def decode(data: bytes) -> list[Point]:
    """The points of a row, in slot order."""
    if not data or data[0] != VERSION:
        raise ValueError(f"unknown history row format {data[:1]!r}")
    count = data[1] | (data[2] << 8)
    columns = array("q")
    columns.frombytes(zlib.decompress(data[3:]))
    if sys.byteorder == "big":
        columns.byteswap()
    if len(columns) != count * WIDTH:
        raise ValueError("history row is truncated")
    rows: list[list[int]] = [[0] * WIDTH for _ in range(count)]
    for index in range(WIDTH):
        value = 0
        base = index * count
        for i in range(count):
            value += columns[base + i]
            rows[i][index] = value
    return [Point(*row) for row in rows]


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
