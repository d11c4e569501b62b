"""Storing what a heartbeat measured of each session (device readings ride on the node's row).

A sample stands for the time since the agent's previous reading of that session
(``interval_ms``), capped at the node timeout (longer than that, the node was lost and its
sessions ended) and never overlapping a reading already stored (``at_ms`` on the agent's
clock: a heartbeat the manager stored but whose answer was lost, then sent again, adds
nothing). It is added to the open minute of its series (the minute it arrived in, by the
manager's clock); when a sample arrives in a later minute, the open one is closed: written as
a ``usage_minutes`` row. Packing moves minute rows into the packed history and adds them to
the day's accounting row in one transaction, so the accounting plus the unpacked minutes is
always exactly the sum of the closed points.

Writers of a series lock its row first (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite has one
writer at a time), so a heartbeat and the maintenance loop never close one minute twice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import SessionUsage
from gpuslice.common.schemas.monitoring import IdleRule
from gpuslice.common.schemas.sessions import SessionType
from gpuslice.manager.db.models import (
    ResourcePolicyRow,
    SessionRow,
    UsageDailyRow,
    UsageMinuteRow,
    UsageSeriesRow,
    UserRow,
)
from gpuslice.manager.errors import Conflict
from gpuslice.manager.services.monitoring.codec import KiB, Point, quantized

log = logging.getLogger(__name__)
MINUTE_MS = 60_000
DAY_MINUTES = 1440
SERIES: Table = UsageSeriesRow.__table__  # type: ignore[assignment]
OPEN = ("covered_ms", "cpu_ms", "cpu_sum", "mem_sum", "mem_max", "gpu_ms", "gpu_mem_sum",
        "gpu_mem_max", "gpu_util_sum")


@dataclass(frozen=True, slots=True)
class Reported:
    """What storing needs of a session its node reported: its size, kind and idle rule."""

    id: str
    owner_id: str
    gpu: int
    cpu: int
    batch: bool
    rule: IdleRule | None


class Stale(Exception):
    """A series row changed between reading and writing it: redo the transaction."""


async def store(
    db: AsyncSession, node_id: str, usage: Sequence[SessionUsage], now: datetime,
    max_gap_ms: int,
) -> int:
    """Store one heartbeat's samples; commits. Samples of sessions that are not on this node
    are ignored. Returns how many samples were stored."""
    if not usage:
        return 0
    for attempt in range(3):
        try:
            stored = await _store_once(db, node_id, usage, now, max_gap_ms)
            await db.commit()
            return stored
        except (IntegrityError, DBAPIError, Stale):
            # A series created by a concurrent writer, a lost lock on SQLite, a deadlock on
            # PostgreSQL: nothing was written; read again and redo.
            await db.rollback()
            log.warning("storing usage samples of node %s: conflict (attempt %d)", node_id,
                        attempt + 1)
    # The agent keeps these readings and sends them (as one longer interval) next time.
    raise Conflict("usage samples could not be stored now; send them again",
                   code="samples_busy")


async def _store_once(
    db: AsyncSession, node_id: str, usage: Sequence[SessionUsage], now: datetime,
    max_gap_ms: int,
) -> int:
    sessions, series = await _read(db, node_id, [u.session_id for u in usage])
    updates, created, closed = [], [], []
    for sample in usage:
        session = sessions.get(sample.session_id)
        if session is None:
            continue
        row = series.get(sample.session_id)
        applied = _apply(row, session, sample, node_id, now, max_gap_ms)
        if applied is None:
            continue  # a reading already stored
        values, closing = applied
        if closing is not None:
            closed.append(closing)
        if row is None:
            created.append(values)
        else:
            updates.append((row, values))
    await update_series(db, updates)
    if created:
        await db.execute(insert(SERIES), created)
    await write_closed(db, closed)
    return len(created) + len(updates)


async def update_series(
    db: AsyncSession, changes: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
) -> None:
    """Set new values on series rows, each only if it is still as it was read (its open
    minute, its last reading): on SQLite, whose reads take no lock, this is what keeps a
    heartbeat and the maintenance loop from closing one minute twice. The first write also
    takes SQLite's write lock, so what follows in the transaction is serialized. A row that
    changed meanwhile fails the whole transaction (``Stale``), to be redone."""
    if not changes:
        return
    names = tuple(changes[0][1])
    params = [
        {"b_id": row["id"], "b_minute": row["minute"], "b_reading": row["reading_ms"],
         "b_covered": row["covered_ms"], **{f"v_{k}": values[k] for k in names}}
        for row, values in changes
    ]
    result = await db.execute(_guarded_update(names), params)
    dialect = db.get_bind().dialect
    # PostgreSQL holds the rows locked since they were read (lock_series); elsewhere the count
    # of rows changed says whether one moved.
    if dialect.name != "postgresql" and result.rowcount != len(params):  # type: ignore[attr-defined]
        raise Stale("a usage series changed while it was being written")


@functools.cache
def _guarded_update(names: tuple[str, ...]) -> Any:
    # Built once per set of columns (a heartbeat's path runs it for every node, every few
    # seconds: building and keying the statement anew cost more than running it).
    return update(SERIES).where(
        SERIES.c.id == bindparam("b_id"),
        SERIES.c.minute.is_not_distinct_from(bindparam("b_minute")),
        SERIES.c.reading_ms.is_not_distinct_from(bindparam("b_reading")),
        SERIES.c.covered_ms == bindparam("b_covered"),
    ).values({**{name: bindparam(f"v_{name}") for name in names},
              "revision": SERIES.c.revision + 1})


async def lock_series(
    db: AsyncSession, where: Any, limit: int | None = None
) -> list[Mapping[str, Any]]:
    """Series rows matching ``where``, locked for this transaction, in id order (one lock
    order for every writer: no deadlock between two of them)."""
    query = select(SERIES).where(where).order_by(SERIES.c.id).limit(limit).with_for_update()
    return [dict(row._mapping) for row in await db.execute(query)]


def closed_point(row: Mapping[str, Any]) -> tuple[int, Point]:
    """The open minute of a series row as a closed point: ``(epoch minute, point)``, its sums
    made whole multiples of their time (``codec.quantized``): the point kept is exactly what
    is accounted."""
    covered = int(row["covered_ms"])
    return int(row["minute"]), quantized(Point(
        slot=int(row["minute"]) % 60, covered_ms=covered, fgpu_sum=int(row["gpu"]) * covered,
        **{key: int(row[key]) for key in OPEN if key != "covered_ms"},
    ))


def open_point(series: UsageSeriesRow) -> tuple[int, Point] | None:
    """The open minute of a series (an ORM row) as a point, if one is open."""
    if series.minute is None:
        return None
    return closed_point({c: getattr(series, c) for c in ("id", "minute", "gpu", *OPEN)})


async def write_closed(db: AsyncSession, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write the open minutes of these series rows, a minute row each (one statement: the
    day's accounting gets them when they are packed, see ``maintenance.pack_hours``)."""
    minutes = []
    for row in rows:
        minute, point = closed_point(row)
        sums = {key: getattr(point, key) for key in ("covered_ms", "fgpu_sum", *OPEN[1:])}
        minutes.append({"series_id": row["id"], "minute": minute, **sums})
    if minutes:
        # Added to a minute already there: the same minute closed, then opened again by a
        # manager whose clock is behind (several replicas); each close is counted once.
        await db.execute(_add_to(db, UsageMinuteRow.__table__, ["series_id", "minute"]), minutes)


async def add_to_days(db: AsyncSession, days: list[dict[str, Any]]) -> None:
    """Add sums to accounting rows (``series_id``, ``day``, ``owner_id`` and the sums)."""
    if days:
        await db.execute(_add_to(db, UsageDailyRow.__table__, ["series_id", "day", "owner_id"]),
                         days)


def _add_to(db: AsyncSession, table: Any, keys: list[str]) -> Any:
    """INSERT, or on the same key add the sums (and keep the higher peaks). Built once per
    dialect and table: SQLAlchemy does not cache the compiled form of an upsert."""
    dialect = db.get_bind().dialect.name
    cached = _UPSERTS.get((dialect, table.name))
    if cached is None:
        cached = _UPSERTS[(dialect, table.name)] = _upsert(dialect, table, keys)
    return cached


_UPSERTS: dict[tuple[str, str], Any] = {}


def _upsert(dialect: str, table: Any, keys: list[str]) -> Any:
    statement: Any
    higher: Any
    if dialect == "postgresql":
        statement, higher = postgresql.insert(table), func.greatest
    else:
        statement, higher = sqlite.insert(table), func.max  # SQLite's max(a, b) is scalar
    merged = {
        c.name: higher(table.c[c.name], statement.excluded[c.name])
        if c.name.endswith("_max") else table.c[c.name] + statement.excluded[c.name]
        for c in table.columns if c.name not in keys
    }
    return statement.on_conflict_do_update(index_elements=keys[:2], set_=merged)


async def _read(
    db: AsyncSession, node_id: str, ids: list[str]
) -> tuple[dict[str, Reported], dict[str, dict[str, Any]]]:
    """The reported sessions that are on this node, and the series rows of those that have
    one, locked. One query in the usual case (every session already has its series)."""
    result = await db.execute(_READ_SERIES, {"ids": ids, "node": node_id})
    sessions, series = {}, {}
    for row in result:
        values = dict(row._mapping)
        sessions[values["session_id"]] = _reported_of(values)
        series[values["session_id"]] = {c: values[c] for c in _READ_COLUMNS}
    missing = [i for i in ids if i not in sessions]
    if missing:  # their first sample: no series yet
        found = await db.execute(_READ_NEW, {"ids": missing, "node": node_id})
        sessions.update((r._mapping["s_id"], _reported_of(dict(r._mapping))) for r in found)
    return sessions, series


# Plain table columns (no ORM entity: nothing to build per row), statements built once.
_S: Table = SessionRow.__table__  # type: ignore[assignment]
_U: Table = UserRow.__table__  # type: ignore[assignment]
_P: Table = ResourcePolicyRow.__table__  # type: ignore[assignment]
_INFO = (_S.c.id.label("s_id"), _S.c.owner_id.label("s_owner"), _S.c.gpu.label("s_gpu"),
         _S.c.cpu.label("s_cpu"), _S.c.type.label("s_type"), _P.c.idle_rule.label("s_rule"))
_OWNERS = _S.join(_U, _U.c.id == _S.c.owner_id).outerjoin(_P, _P.c.id == _U.c.policy_id)
_ON_NODE = _S.c.node_id == bindparam("node")
# What storing a sample needs of a series (not its figures "now": the JSON and times there
# cost more to load than the rest).
_READ_COLUMNS = ("id", "session_id", "owner_id", "gpu", "last_at", "reading_ms", "minute",
                 *OPEN, "gpu_idle_since", "cpu_idle_since")
_READ_SERIES = (
    select(*(SERIES.c[c] for c in _READ_COLUMNS), *_INFO)
    .select_from(SERIES.join(_OWNERS, _S.c.id == SERIES.c.session_id))
    .where(SERIES.c.session_id.in_(bindparam("ids", expanding=True)), _ON_NODE)
    .order_by(SERIES.c.id)
    .with_for_update(of=SERIES)
)
_READ_NEW = select(*_INFO).select_from(_OWNERS).where(
    _S.c.id.in_(bindparam("ids", expanding=True)), _ON_NODE
)


def _reported_of(values: Mapping[str, Any]) -> Reported:
    rule = values["s_rule"]
    return Reported(values["s_id"], values["s_owner"], values["s_gpu"], values["s_cpu"],
                    values["s_type"] == SessionType.BATCH,
                    IdleRule.model_validate(rule) if rule else None)


def _apply(
    row: Mapping[str, Any] | None, session: Reported, sample: SessionUsage, node_id: str,
    now: datetime, max_gap_ms: int,
) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """The series' new values with ``sample`` added, and the open minute it closes (with the
    part of the sample that fell in it); ``None`` for a reading already stored."""
    previous = row["reading_ms"] if row is not None else None
    if previous is not None and sample.at_ms == previous:
        return None  # sent again: its answer was lost on the way
    covered = min(sample.interval_ms or 0, max_gap_ms)
    if previous is not None and sample.at_ms is not None and sample.at_ms > previous:
        covered = min(covered, sample.at_ms - previous)
    # An earlier time than the last reading: the node's clock was set back. Its interval
    # (measured on the same clock) is then 0 or its own; the figures are taken as they are.
    now_ms = int(now.timestamp() * 1000)
    minute = now_ms // MINUTE_MS
    closing = None
    if row is not None and row["minute"] == minute:
        sums = _add(dict(row), sample, covered)
    else:
        earlier = 0
        if row is not None and row["minute"] is not None:
            # The part of the sample before this minute goes to the minute it closes, as far
            # as that one has room (a minute covers 60 s at most).
            before = min(covered, max(0, minute * MINUTE_MS - (now_ms - covered)))
            earlier = min(before, max(0, MINUTE_MS - int(row["covered_ms"])))
            closing = {**row, **_add(dict(row), sample, earlier)}
        sums = _add(None, sample, covered - earlier)
    gap = row is None or now - row["last_at"] > timedelta(milliseconds=max_gap_ms)
    start = now - timedelta(milliseconds=covered)
    values: dict[str, Any] = {
        **sums, "minute": minute, "last_at": now, "node_id": node_id, "gpu": session.gpu,
        "reading_ms": sample.at_ms if sample.at_ms is not None else previous,
        "cpu": sample.cpu, "mem": sample.mem,
        "gpus": [g.model_dump() for g in sample.gpus] if sample.gpus is not None else None,
        "gpu_idle_since": _mark(None if gap else row["gpu_idle_since"],  # type: ignore[index]
                                gpu_idle(sample, session.rule), start),
        "cpu_idle_since": _mark(None if gap else row["cpu_idle_since"],  # type: ignore[index]
                                cpu_idle(sample, session, session.rule), start),
    }
    if row is None:
        values.update(session_id=session.id, owner_id=session.owner_id, first_at=now)
    return values, closing


def _add(open_sums: dict[str, Any] | None, sample: SessionUsage, covered: int) -> dict[str, int]:
    sums = {key: int(open_sums[key]) if open_sums else 0 for key in OPEN}
    mem = sample.mem // KiB
    sums["covered_ms"] += covered
    sums["mem_sum"] += mem * covered
    sums["mem_max"] = max(sums["mem_max"], mem)
    if sample.cpu is not None:
        sums["cpu_ms"] += covered
        sums["cpu_sum"] += sample.cpu * covered
    gpus = sample.gpus or []
    if gpus and all(g.mem_used is not None and g.utilization is not None for g in gpus):
        gpu_mem = sum(g.mem_used or 0 for g in gpus) // KiB
        sums["gpu_ms"] += covered
        sums["gpu_mem_sum"] += gpu_mem * covered
        sums["gpu_mem_max"] = max(sums["gpu_mem_max"], gpu_mem)
        # A session on several GPUs: their mean (each device weighs the same).
        sums["gpu_util_sum"] += sum(g.utilization or 0 for g in gpus) * covered // len(gpus)
    return sums


def gpu_idle(sample: SessionUsage, rule: IdleRule | None) -> bool | None:
    """Whether the sample shows the session's GPUs idle under ``rule`` (every device below the
    threshold); ``None`` when not judged (no rule, no GPU) or unknown (not measured)."""
    if rule is None or rule.gpu_util is None or not sample.gpus:
        return None
    utils = [g.utilization for g in sample.gpus]
    if any(u is None for u in utils):
        return None
    return max(u for u in utils if u is not None) < rule.gpu_util


def cpu_idle(sample: SessionUsage, session: Reported, rule: IdleRule | None) -> bool | None:
    """Whether the session used less than the rule's share of its CPU allocation."""
    if rule is None or rule.cpu_util is None or sample.cpu is None or session.cpu <= 0:
        return None
    return sample.cpu * 100 < rule.cpu_util * session.cpu


def _mark(since: datetime | None, idle: bool | None, start: datetime) -> datetime | None:
    # Idle since the first idle sample of the current run; busy or unknown ends the run.
    if idle is not True:
        return None
    return since if since is not None else start
