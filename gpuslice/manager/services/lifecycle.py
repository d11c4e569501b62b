"""The one door for session status changes: ``transition()``.

It checks the move against ``LEGAL``, changes the status with a conditional UPDATE (``WHERE
status = <the status we saw>``, so of two racing writers exactly one wins), appends the status
history row, releases the capacity of a session leaving a holding status, and bumps its node's
assignment version so the agent hears about it. All in the caller's transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ScalarSelect, case, func, insert, select, type_coerce, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.manager.db.base import UTCDateTime, utcnow
from gpuslice.manager.db.models import (
    AllocationRow,
    DeviceRow,
    NodeRow,
    SessionRow,
    StatusHistoryRow,
)
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.events import wake_after_commit
from gpuslice.manager.services.notify import enqueue as notify

log = logging.getLogger(__name__)
S = SessionStatus
LEGAL: dict[SessionStatus, frozenset[SessionStatus]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.CANCELLED, S.ERROR}),
    S.SCHEDULED: frozenset({S.PREPARING, S.RUNNING, S.TERMINATING, S.TERMINATED, S.ERROR}),
    S.PREPARING: frozenset({S.RUNNING, S.TERMINATING, S.TERMINATED, S.ERROR}),
    S.RUNNING: frozenset({S.TERMINATING, S.TERMINATED, S.ERROR}),
    # back to PENDING: a preempted session whose container is gone, queued again
    S.TERMINATING: frozenset({S.TERMINATED, S.ERROR, S.PENDING}),
    S.TERMINATED: frozenset(),
    S.ERROR: frozenset(),
    S.CANCELLED: frozenset(),
}


async def transition(
    db: AsyncSession, row: SessionRow, to: SessionStatus, reason: str, *,
    node_reported: bool = False, **values: Any,
) -> None:
    """Move ``row`` from the status it holds now to ``to``; ``values`` are set in the same UPDATE.

    ``node_reported``: the session's node told us (its agent's report), so the move is no news
    to it: its assignment version stays, and no long-poll answers (each answer rebuilds the
    node's whole desired state, and the agent then lists its containers; the PREPARING,
    RUNNING and end reports were three of a session's four answers). An end the node reports
    still releases the slice here; the agent removes that container itself after its report,
    and a session gone from later answers is removed then if it is still there.

    Raises ``IllegalTransition`` for a move the lifecycle forbids and ``StaleStatus`` when the
    row's status in the database is no longer ``row.status`` (someone else moved it first).
    """
    current = SessionStatus(row.status)
    if to not in LEGAL[current]:
        raise IllegalTransition(
            f"session {row.name} is {current}; it cannot become {to}", field="status"
        )
    now = utcnow()
    fields: dict[str, Any] = {"status": to, "status_reason": reason, "updated_at": now, **values}
    if to is not S.PENDING:
        fields.setdefault("wait_code", None)
        fields.setdefault("queue_position", None)
    if to is S.RUNNING:
        fields.setdefault("running_since", now)
    if current is S.PENDING:  # placed or ended: capacity held for it is its no more
        fields.setdefault("held_node_id", None)
        fields.setdefault("held_slices", None)
    result = await db.execute(
        update(SessionRow)
        .where(SessionRow.id == row.id, SessionRow.status == current)
        .values(**fields)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleStatus(f"session {row.name} changed status meanwhile; try again")
    await _append_history(db, [row], current, to, reason, now)
    await notify.status_changed(db, row.id, current, to, reason, now)
    releases = current in HOLDING and to not in HOLDING
    # a release is from the node it held (a session queued again leaves it: node_id NULL)
    node_id = row.node_id if releases else fields.get("node_id", row.node_id)
    if node_id is not None and (releases or not node_reported):
        await _touch_node(db, row, node_id, releases, bump=not node_reported)
        if not node_reported:
            wake_after_commit(db, "node", node_id)
    if releases:
        wake_after_commit(db, "scheduler")
    for key, value in fields.items():
        set_committed_value(row, key, value)
    # One line per status change (the reason is the platform's text, never user data).
    log.info("session %s: %s -> %s: %s", row.name, current.value, to.value, reason,
             extra={"session_id": row.id, "node_id": node_id})


def running_since() -> ScalarSelect[datetime]:
    """When a session (``SessionRow``, correlated) last became RUNNING, from its status history:
    a scalar subquery for a statement over sessions (aware, as the column reads back)."""
    return (
        select(type_coerce(func.max(StatusHistoryRow.at), UTCDateTime))
        .where(StatusHistoryRow.session_id == SessionRow.id,
               StatusHistoryRow.to_status == S.RUNNING)
        .correlate(SessionRow)
        .scalar_subquery()
    )


async def note(db: AsyncSession, row: SessionRow, reason: str, **values: Any) -> None:
    """Something that happened to a session whose status stays (its node made its container
    again: a restart): a line in its status history and its reason, only while it holds the
    status it held when loaded (``StaleStatus`` otherwise); ``values`` are set with it."""
    current = SessionStatus(row.status)
    now = utcnow()
    result = await db.execute(
        update(SessionRow)
        .where(SessionRow.id == row.id, SessionRow.status == current)
        .values(status_reason=reason, updated_at=now, **values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleStatus(f"session {row.name} changed status meanwhile; try again")
    await _append_history(db, [row], current, current, reason, now)
    for key, value in {"status_reason": reason, **values}.items():
        set_committed_value(row, key, value)
    log.info("session %s: %s: %s", row.name, current.value, reason,
             extra={"session_id": row.id, "node_id": row.node_id})


async def transition_many(
    db: AsyncSession, rows: Sequence[SessionRow], to: SessionStatus,
    changes: Sequence[dict[str, Any]],
) -> None:
    """``transition()`` for many sessions of one status at once, in few statements: each
    row moves to ``to`` with its own ``changes`` (``reason`` and the values to set, e.g.
    ``node_id``), all or none. Raises as ``transition()`` does, ``StaleStatus`` when any row
    moved meanwhile (nothing of this call is then to be kept: the caller rolls back). The rows
    in memory are not updated. Moves that release capacity take ``transition()``'s way, one
    by one (each its own allocations)."""
    if not rows:
        return
    current = SessionStatus(rows[0].status)
    if any(SessionStatus(r.status) is not current for r in rows):
        raise ValueError("transition_many moves sessions of one status")
    if to not in LEGAL[current]:
        raise IllegalTransition(
            f"sessions that are {current} cannot become {to}", field="status"
        )
    if current in HOLDING and to not in HOLDING:
        for row, change in zip(rows, changes, strict=True):
            values = {k: v for k, v in change.items() if k != "reason"}
            await transition(db, row, to, change["reason"], **values)
        return
    now = utcnow()
    ids = [r.id for r in rows]
    keys = sorted({k for change in changes for k in change} - {"reason"})
    fields: dict[str, Any] = {
        "status": to, "updated_at": now,
        "status_reason": _per_row(ids, [c["reason"] for c in changes]),
        **{k: _per_row(ids, [c.get(k, getattr(r, k)) for r, c in zip(rows, changes,
                                                                    strict=True)])
           for k in keys},
    }
    if to is not S.PENDING:
        fields.setdefault("wait_code", None)
        fields.setdefault("queue_position", None)
    if current is S.PENDING:  # placed or ended: capacity held for them is theirs no more
        fields.setdefault("held_node_id", None)
        fields.setdefault("held_slices", None)
    moved = (await db.execute(
        update(SessionRow)
        .where(SessionRow.id.in_(ids), SessionRow.status == current)
        .values(**fields)
        .returning(SessionRow.id)
        .execution_options(synchronize_session=False)
    )).scalars().all()
    if len(moved) != len(ids):
        raise StaleStatus(f"{len(ids) - len(moved)} of the sessions changed status meanwhile")
    await db.execute(insert(StatusHistoryRow), [
        {"session_id": r.id, "owner_id": r.owner_id, "from_status": current, "to_status": to,
         "reason": c["reason"], "at": now}
        for r, c in zip(rows, changes, strict=True)
    ])
    wake_after_commit(db, "history")
    for r, c in zip(rows, changes, strict=True):
        await notify.status_changed(db, r.id, current, to, c["reason"], now)
    touched = (c.get("node_id", r.node_id) for r, c in zip(rows, changes, strict=True))
    nodes: list[str] = sorted({str(n) for n in touched if n is not None})
    if nodes:
        await db.execute(update(NodeRow).where(NodeRow.id.in_(nodes)).values(
            assignment_version=NodeRow.assignment_version + 1))
        for node_id in nodes:
            wake_after_commit(db, "node", node_id)
    for r, c in zip(rows, changes, strict=True):
        log.info("session %s: %s -> %s: %s", r.name, current.value, to.value, c["reason"],
                 extra={"session_id": r.id, "node_id": c.get("node_id", r.node_id)})


def _per_row(ids: Sequence[str], values: Sequence[Any]) -> Any:
    """One value per session id, as a SQL expression (a CASE on the id; a constant when they
    are all the same)."""
    if all(v == values[0] for v in values):
        return values[0]
    return case(dict(zip(ids, values, strict=True)), value=SessionRow.id)


async def record_created(db: AsyncSession, rows: Sequence[SessionRow], reason: str) -> None:
    """History for new PENDING sessions (their first status is set on insert, not moved to)."""
    await _append_history(db, rows, None, S.PENDING, reason, utcnow())
    wake_after_commit(db, "scheduler")


async def _append_history(
    db: AsyncSession,
    rows: Sequence[SessionRow],
    from_status: SessionStatus | None,
    to: SessionStatus,
    reason: str,
    at: Any,
) -> None:
    await db.execute(
        insert(StatusHistoryRow),
        [
            {
                "session_id": r.id, "owner_id": r.owner_id, "from_status": from_status,
                "to_status": to, "reason": reason, "at": at,
            }
            for r in rows
        ],
    )
    wake_after_commit(db, "history")


async def _touch_node(
    db: AsyncSession, row: SessionRow, node_id: str, release: bool, *, bump: bool = True
) -> None:
    # Lock order everywhere: session, then node, then devices (placements: node, devices, then
    # a PENDING session no one else holds), so two writers never wait on each other in a cycle.
    values: dict[str, Any] = {"assignment_version": NodeRow.assignment_version + 1} if bump else {}
    if release:
        values["cpu_used"] = NodeRow.cpu_used - row.cpu
        values["mem_used"] = NodeRow.mem_used - row.mem
    await db.execute(update(NodeRow).where(NodeRow.id == node_id).values(**values))
    if release:
        await _release_devices(db, row.id)


async def _release_devices(db: AsyncSession, session_id: str) -> None:
    held = (
        await db.execute(
            select(AllocationRow.id, AllocationRow.device_id, AllocationRow.gpu)
            .where(AllocationRow.session_id == session_id, AllocationRow.released_at.is_(None))
            .order_by(AllocationRow.device_id)
        )
    ).all()
    for _alloc_id, device_id, gpu in held:
        if device_id is not None:
            await db.execute(
                update(DeviceRow)
                .where(DeviceRow.id == device_id)
                .values(used=DeviceRow.used - gpu)
            )
    if held:
        await db.execute(
            update(AllocationRow)
            .where(AllocationRow.id.in_([a for a, _, _ in held]))
            .values(released_at=utcnow())
        )
