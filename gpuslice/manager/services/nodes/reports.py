"""Sessions' actual state as their node's agent reports it (PREPARING, RUNNING, ended).

Reports are idempotent and never undo a stop: a repeated or late report changes nothing, and
every status change goes through ``lifecycle.transition``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only

from gpuslice.common.schemas.agents import StateReport
from gpuslice.common.schemas.sessions import FINAL, SessionResult, SessionStatus, SessionType
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import InvalidRequest, NotFound, StaleStatus
from gpuslice.manager.scheduler.reasons import requeued
from gpuslice.manager.services.lifecycle import note, transition

S = SessionStatus
_REPORTABLE = (S.PREPARING, S.RUNNING, S.TERMINATED, S.ERROR)
_FINAL_REPORTS = (S.TERMINATED, S.ERROR)
# What applying a report reads of the session (a status change and what it releases), not
# its command, environment, folders or apps: three reports a session, each decoding them.
_REPORTED_COLUMNS = load_only(
    SessionRow.id, SessionRow.name, SessionRow.owner_id, SessionRow.type, SessionRow.status,
    SessionRow.status_reason, SessionRow.node_id, SessionRow.cpu, SessionRow.mem,
    SessionRow.gpu_mem, SessionRow.preempted_by, SessionRow.preemptions,
    raiseload=True,
)


async def report_state(
    db: AsyncSession, node_id: str, session_id: str, body: StateReport
) -> SessionStatus:
    """Apply what the agent of node ``node_id`` sees; repeated or outdated reports change
    nothing.

    Returns the session's status afterwards.
    """
    for _attempt in range(3):
        row = await db.scalar(
            select(SessionRow).options(_REPORTED_COLUMNS)
            .where(SessionRow.id == session_id, SessionRow.node_id == node_id)
        )
        if row is None:
            raise NotFound(f"session {session_id} is not assigned to this node")
        try:
            await _apply_report(db, row, body)
            await db.commit()
            return SessionStatus(row.status)
        except StaleStatus:
            await db.rollback()
            db.expunge_all()
    raise StaleStatus(f"session {session_id} keeps changing; report again")


async def _apply_report(db: AsyncSession, row: SessionRow, body: StateReport) -> None:
    if body.status not in _REPORTABLE:
        raise InvalidRequest(
            f"agents report PREPARING, RUNNING, TERMINATED or ERROR, not {body.status}",
            field="status",
        )
    current = SessionStatus(row.status)
    if current in FINAL:
        if body.status in _FINAL_REPORTS and body.logs is not None:
            await _keep_late_logs(db, row.id, body.logs)
        return
    if body.status in (S.PREPARING, S.RUNNING):
        # Once stopping, a late "running" must not undo the stop; never go back to PREPARING.
        if current in (S.SCHEDULED, S.PREPARING) and current is not body.status:
            await transition(db, row, body.status, body.reason or _started(body.status),
                             node_reported=True)
        elif current is S.PREPARING and body.status is S.PREPARING and body.reason:
            await _progress(db, row.id, body.reason)
        elif current is S.RUNNING and body.status is S.RUNNING and body.restarted:
            await note(db, row, body.reason or "restarted by its node")
        return
    logs: dict[str, Any] = {"final_logs": body.logs} if body.logs is not None else {}
    if current is S.TERMINATING and row.preempted_by is not None:
        await _requeue(db, row)
    elif body.status is S.TERMINATED:
        result, reason = _ended(row, body)
        await transition(
            db, row, S.TERMINATED, reason, node_reported=True, result=result,
            exit_code=body.exit_code, **logs,
        )
    else:
        await transition(db, row, S.ERROR, body.reason or "failed on the node",
                         node_reported=True, **logs)


async def _requeue(db: AsyncSession, row: SessionRow) -> None:
    """A preempted session whose container is gone: back to PENDING with its place in the
    queue (its ``created_at`` is kept), its capacity released for the winner that holds it.
    Its output in its folders stays; it starts again by itself."""
    await transition(
        db, row, S.PENDING, requeued(row.status_reason),
        node_reported=True, node_id=None, preempted_by=None, running_since=None,
        preemptions=(row.preemptions or 0) + 1, result=None, exit_code=None,
        # asked by GPU memory: its slice is chosen again where it lands next
        **({"gpu": 0} if row.gpu_mem else {}),
    )


async def _progress(db: AsyncSession, session_id: str, reason: str) -> None:
    # What PREPARING is doing now ("pulling IMAGE: 45%"): the reason, not a status change, so
    # no history row; only while the session is still PREPARING.
    await db.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.status == S.PREPARING)
        .values(status_reason=reason)
        .execution_options(synchronize_session=False)
    )


async def _keep_late_logs(db: AsyncSession, session_id: str, logs: str) -> None:
    # The session ended without the agent (node lost, then back): its report still brings the
    # output the user would otherwise lose. Never overwrite logs already kept.
    await db.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.final_logs.is_(None))
        .values(final_logs=logs)
        .execution_options(synchronize_session=False)
    )


def _started(status: SessionStatus) -> str:
    return "preparing the container" if status is S.PREPARING else "running"


def _ended(row: SessionRow, body: StateReport) -> tuple[str | None, str]:
    if row.status == S.TERMINATING:
        # It ends for the reason it was stopped for ("stopped by alice", "idle for 30 min:
        # ..."), which says more than the agent's "stopped".
        return None, row.status_reason or body.reason or "stopped"
    if row.type == SessionType.BATCH and body.exit_code is not None:
        result = SessionResult.SUCCESS if body.exit_code == 0 else SessionResult.FAILED
        return result, body.reason or f"exited with code {body.exit_code}"
    return None, body.reason or f"exited with code {body.exit_code}"
