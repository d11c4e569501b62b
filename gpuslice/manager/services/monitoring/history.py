"""A series' history: reading it back at a chosen step, and its totals.

Points live in three places, read together: the open minute (on the series row), closed
minutes not yet packed (``usage_minutes``) and packed rows (``usage_history``: hours of minute
points, or days of hour points once rolled up). Totals are the accounting rows (the packed
points) plus the unpacked minutes and the open minute: exactly the sum of all the points.
Readers that read several of them go through :func:`steady`, so that a minute closed or an
hour packed meanwhile is not counted twice or missed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.monitoring import GpuNow, UsageNow, UsagePoint, UsageTotals
from gpuslice.manager.db.models import (
    UsageDailyRow,
    UsageHistoryRow,
    UsageMinuteRow,
    UsageSeriesRow,
)
from gpuslice.manager.services.monitoring.codec import KiB, Point, decode
from gpuslice.manager.services.monitoring.samples import OPEN, SERIES, open_point

T = TypeVar("T")
HOUR_MS = 3_600_000
SUMS = ("covered_ms", "fgpu_sum", "cpu_ms", "cpu_sum", "mem_sum", "gpu_ms", "gpu_mem_sum",
        "gpu_util_sum")
_SIX = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class Timed:
    """A point and the epoch second its step starts at."""

    start: int
    point: Point


async def points(
    db: AsyncSession, series: UsageSeriesRow, since: int, until: int
) -> list[Timed]:
    """Every point of ``series`` whose step starts in [since, until) (epoch seconds), in order."""
    found: list[Timed] = []
    packed = await db.execute(
        select(UsageHistoryRow.step, UsageHistoryRow.start, UsageHistoryRow.points).where(
            UsageHistoryRow.series_id == series.id,
            or_(and_(UsageHistoryRow.step == 60, UsageHistoryRow.start > since - 3600),
                and_(UsageHistoryRow.step == 3600, UsageHistoryRow.start > since - 86400)),
            UsageHistoryRow.start < until,
        )
    )
    for step, start, data in packed:
        found.extend(Timed(start + p.slot * step, p) for p in decode(data))
    minutes = await db.execute(
        select(UsageMinuteRow).where(UsageMinuteRow.series_id == series.id,
                                  UsageMinuteRow.minute >= since // 60,
                                  UsageMinuteRow.minute < -(-until // 60))
    )
    found.extend(Timed(m.minute * 60, minute_point(m)) for m in minutes.scalars())
    if (opened := open_point(series)) is not None:
        found.append(Timed(opened[0] * 60, opened[1]))
    return sorted((t for t in found if since <= t.start < until), key=lambda t: t.start)


async def steady(
    db: AsyncSession, where: Any, read: Callable[[], Awaitable[T]], attempts: int = 5
) -> T:
    """``read()`` again until the revisions of the series matching ``where`` are the same
    before and after it: points and sums move between the series row, the minute rows,
    the packed rows and the accounting rows, and a read must not catch one half-moved."""
    result = await read()
    for _ in range(attempts):
        before = await _revisions(db, where)
        result = await read()
        if await _revisions(db, where) == before:
            break
    return result


async def _revisions(db: AsyncSession, where: Any) -> dict[int, int]:
    return dict((await db.execute(select(SERIES.c.id, SERIES.c.revision).where(where)))
                .tuples().all())


def bucketed(timed: Iterable[Timed], since: int, step: int) -> list[UsagePoint]:
    """Points merged into steps of ``step`` seconds from ``since``, as averages."""
    merged: dict[int, Point] = {}
    for item in timed:
        slot = (item.start - since) // step
        current = merged.get(slot)
        merged[slot] = item.point if current is None else current.merged(item.point, slot)
    return [public_point(since + slot * step, merged[slot]) for slot in sorted(merged)]


async def totals(db: AsyncSession, series: UsageSeriesRow | None) -> UsageTotals:
    """The series' whole usage: its days' accounting, the minutes not yet packed, the open
    minute."""
    sums = dict.fromkeys(SUMS, 0)
    if series is not None:
        for table in (UsageDailyRow, UsageMinuteRow):
            row = (await db.execute(
                select(*(func.coalesce(func.sum(getattr(table, k)), 0) for k in SUMS))
                .where(table.series_id == series.id)
            )).one()
            sums = {k: sums[k] + int(v) for k, v in zip(SUMS, row, strict=True)}
        if (opened := open_point(series)) is not None:
            sums = {k: v + getattr(opened[1], k) for k, v in sums.items()}
    return public_totals(sums)


def public_totals(sums: Mapping[str, int]) -> UsageTotals:
    """Exact sums (see ``codec.Point``) as hours and GiB-hours."""
    return UsageTotals(
        seconds=_ratio(sums["covered_ms"], 1000),
        fgpu_hours=_ratio(sums["fgpu_sum"], 1000 * HOUR_MS),
        cpu_hours=_ratio(sums["cpu_sum"], 1000 * HOUR_MS),
        mem_gib_hours=_ratio(sums["mem_sum"], KiB * KiB * HOUR_MS),
        gpu_mem_gib_hours=_ratio(sums["gpu_mem_sum"], KiB * KiB * HOUR_MS),
        gpu_util=_ratio(sums["gpu_util_sum"], sums["gpu_ms"], "0.1") if sums["gpu_ms"] else None,
    )


def public_point(start: int, p: Point) -> UsagePoint:
    return UsagePoint(
        at=datetime.fromtimestamp(start, UTC),
        seconds=_ratio(p.covered_ms, 1000, "0.001"),
        fgpu=_ratio(p.fgpu_sum, p.covered_ms * 1000, "0.01") if p.covered_ms else Decimal(0),
        cpu=_ratio(p.cpu_sum, p.cpu_ms * 1000, "0.001") if p.cpu_ms else None,
        mem=p.mem_sum * KiB // p.covered_ms if p.covered_ms else None,
        mem_peak=p.mem_max * KiB if p.covered_ms else None,
        gpu_mem=p.gpu_mem_sum * KiB // p.gpu_ms if p.gpu_ms else None,
        gpu_mem_peak=p.gpu_mem_max * KiB if p.gpu_ms else None,
        gpu_util=_ratio(p.gpu_util_sum, p.gpu_ms, "0.1") if p.gpu_ms else None,
    )


def now_of(series: UsageSeriesRow | None) -> UsageNow | None:
    if series is None:
        return None
    gpus = None if series.gpus is None else [GpuNow.model_validate(g) for g in series.gpus]
    cpu = None if series.cpu is None else Decimal(series.cpu) / 1000
    return UsageNow(at=series.last_at, cpu=cpu, mem=series.mem, gpus=gpus)


def _ratio(numerator: int, denominator: int, places: str = "0.000001") -> Decimal:
    return (Decimal(numerator) / Decimal(denominator)).quantize(Decimal(places))


def minute_point(m: UsageMinuteRow) -> Point:
    """A closed minute row as a point (its slot: the minute of its hour)."""
    return Point(int(m.minute % 60), **{k: getattr(m, k) for k in ("covered_ms", "fgpu_sum",
                                                                  *OPEN[1:])})
