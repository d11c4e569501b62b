"""Keeping history bounded: close stale minutes, pack hours, roll up old days, drop the oldest.

Run by a supervised loop (``monitoring.maintenance_interval``), in batches, each in its own
transaction, after locking the series it touches (the same lock order as heartbeats):

1. **close**: the open minute of a series that has had no sample since that minute ended (a
   session that stopped) is closed as a heartbeat would have closed it.
2. **pack**: closed minutes of past hours are packed into one ``usage_history`` row per series
   and hour (step 60) and added to their days' accounting rows, the minute rows deleted, in
   one transaction.
3. **roll up**: hour rows older than ``minute_retention_days`` become one row per series and
   day of hour points (step 3600): sums added, peaks kept, so totals do not change.
4. **drop**: day rows older than ``hour_retention_days`` are deleted (accounting is kept).

Size is therefore bounded by the retention settings: per session, at most one packed row per
hour for the minute retention, one per day after that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.models import UsageHistoryRow, UsageMinuteRow
from gpuslice.manager.services.monitoring.codec import Point, decode, encode, rolled_up
from gpuslice.manager.services.monitoring.history import SUMS, minute_point
from gpuslice.manager.services.monitoring.samples import (
    DAY_MINUTES,
    OPEN,
    SERIES,
    Stale,
    add_to_days,
    lock_series,
    update_series,
    write_closed,
)

BATCH = 500


@dataclass(frozen=True, slots=True)
class Retention:
    minute_days: int
    hour_days: int


@dataclass(slots=True)
class MaintenanceStats:
    closed: int = 0
    packed: int = 0
    rolled: int = 0
    dropped: int = 0


async def maintain(
    sessionmaker: async_sessionmaker[AsyncSession], retention: Retention, now: datetime
) -> MaintenanceStats:
    """One pass of all four steps, each until done (in batches)."""
    stats = MaintenanceStats()
    minute = int(now.timestamp()) // 60
    async with sessionmaker() as db:
        while (done := await close_stale(db, minute)) > 0:
            stats.closed += done
        while (done := await pack_hours(db, minute - minute % 60)) > 0:
            stats.packed += done
        day_cutoff = (minute // 1440 - retention.minute_days) * 86400
        while (done := await roll_up_days(db, day_cutoff)) > 0:
            stats.rolled += done
        stats.dropped = await drop_old(db, (minute // 1440 - retention.hour_days) * 86400)
    return stats


async def close_stale(db: AsyncSession, minute: int) -> int:
    """Close open minutes that ended before ``minute`` (epoch minutes); commits."""
    rows = await lock_series(db, SERIES.c.minute < minute, limit=BATCH)
    try:
        await update_series(db, [(r, {"minute": None, **dict.fromkeys(OPEN, 0)}) for r in rows])
    except Stale:  # a heartbeat got there first: its minute is no longer stale
        await db.rollback()
        return 0
    await write_closed(db, rows)
    await db.commit()
    return len(rows)


async def pack_hours(db: AsyncSession, before_minute: int) -> int:
    """Pack closed minutes before ``before_minute`` into hour rows; commits."""
    minutes = (await db.scalars(
        select(UsageMinuteRow).where(UsageMinuteRow.minute < before_minute)
        .order_by(UsageMinuteRow.series_id, UsageMinuteRow.minute).limit(BATCH * 10)
    )).all()
    if not minutes:
        await db.commit()
        return 0
    owners = {r["id"]: r["owner_id"]
              for r in await lock_series(db, SERIES.c.id.in_({m.series_id for m in minutes}))}
    keys = [(m.series_id, m.minute) for m in minutes]
    # Deleted first: the delete takes SQLite's write lock, and if another manager packed some
    # of them meanwhile, fewer rows go and nothing is packed twice.
    gone = await db.execute(
        delete(UsageMinuteRow)
        .where(tuple_(UsageMinuteRow.series_id, UsageMinuteRow.minute).in_(keys))
    )
    if gone.rowcount != len(keys):  # type: ignore[attr-defined]
        await db.rollback()
        return 0
    groups: dict[tuple[int, int], list[Point]] = defaultdict(list)
    days: dict[tuple[int, int], Point] = {}
    for m in minutes:
        point = minute_point(m)
        groups[(m.series_id, m.minute // 60 * 3600)].append(point)
        day = (m.series_id, m.minute // DAY_MINUTES)
        days[day] = days[day].merged(point, 0) if day in days else point
    await _merge_into(db, 60, groups)
    # The same sums to the accounting, in the same transaction: totals keep equal history.
    await add_to_days(db, [
        {"series_id": sid, "day": day, "owner_id": owners[sid],
         **{k: getattr(point, k) for k in SUMS}}
        for (sid, day), point in days.items()
    ])
    await _touch(db, {m.series_id for m in minutes})
    await db.commit()
    return len(minutes)


async def roll_up_days(db: AsyncSession, before: int) -> int:
    """Hour rows (minute points) of days before ``before`` (epoch s) → day rows; commits."""
    rows = (await db.execute(
        select(UsageHistoryRow.series_id, UsageHistoryRow.start, UsageHistoryRow.points)
        .where(UsageHistoryRow.step == 60, UsageHistoryRow.start < before)
        .order_by(UsageHistoryRow.series_id, UsageHistoryRow.start).limit(BATCH)
    )).all()
    if not rows:
        await db.commit()
        return 0
    await lock_series(db, SERIES.c.id.in_({r.series_id for r in rows}))
    keys = [(r.series_id, r.start) for r in rows]
    gone = await db.execute(delete(UsageHistoryRow).where(
        UsageHistoryRow.step == 60,
        tuple_(UsageHistoryRow.series_id, UsageHistoryRow.start).in_(keys),
    ))
    if gone.rowcount != len(keys):  # type: ignore[attr-defined]  # rolled up by another
        await db.rollback()
        return 0
    groups: dict[tuple[int, int], list[Point]] = defaultdict(list)
    for series_id, start, data in rows:
        day = start // 86400 * 86400
        hours = rolled_up(decode(data), 60, (start - day) // 60)
        groups[(series_id, day)].extend(hours.values())
    await _merge_into(db, 3600, groups)
    await _touch(db, {r.series_id for r in rows})
    await db.commit()
    return len(rows)


async def drop_old(db: AsyncSession, before: int) -> int:
    """Delete day rows (hour points) of days before ``before`` (epoch s); commits."""
    result = await db.execute(
        delete(UsageHistoryRow).where(UsageHistoryRow.step == 3600, UsageHistoryRow.start < before)
    )
    await db.commit()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def _touch(db: AsyncSession, series_ids: set[int]) -> None:
    # Points moved between tables: readers of these series read again (``history``).
    await db.execute(update(SERIES).where(SERIES.c.id.in_(series_ids))
                     .values(revision=SERIES.c.revision + 1))


async def _merge_into(
    db: AsyncSession, step: int, groups: dict[tuple[int, int], list[Point]]
) -> None:
    """Add points to the packed rows of ``step`` (created, or merged slot by slot)."""
    existing = {
        (r.series_id, r.start): r
        for r in (await db.scalars(select(UsageHistoryRow).where(
            UsageHistoryRow.step == step,
            tuple_(UsageHistoryRow.series_id, UsageHistoryRow.start).in_(list(groups)),
        ))).all()
    }
    for (series_id, start), new in groups.items():
        row = existing.get((series_id, start))
        merged = _by_slot(decode(row.points) if row is not None else [], new)
        if row is None:
            db.add(UsageHistoryRow(series_id=series_id, step=step, start=start,
                                points=encode(merged)))
        else:
            row.points = encode(merged)
    await db.flush()


def _by_slot(old: Iterable[Point], new: Iterable[Point]) -> list[Point]:
    slots: dict[int, Point] = {}
    for point in [*old, *new]:
        current = slots.get(point.slot)
        slots[point.slot] = point if current is None else current.merged(point, point.slot)
    return [slots[slot] for slot in sorted(slots)]
