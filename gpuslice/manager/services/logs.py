"""Session logs, fetched from the node's agent.

The agent dials the manager (nodes may sit behind NAT), so the manager cannot call it. Instead a
log request is a row: it rides to the agent on its next assignments answer (the node's version is
bumped, so a waiting long-poll returns at once), the agent uploads the tail with
``PUT /api/v1/agents/me/logs/{request_id}``, and the waiting user request returns it.

Only a session that may have a container asks its agent. One that has not started yet has no
output; one that has ended answers the logs its agent sent with the final state report
(``sessions.final_logs``), so they outlive the container and the node.
"""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import LogUpload, NodeStatus
from gpuslice.common.schemas.sessions import FINAL, SessionLogs, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LogRequestRow, NodeRow, SessionRow
from gpuslice.manager.errors import AgentTimeout, Conflict, NotFound
from gpuslice.manager.events import Hub, wait_for, wake_after_commit

_NOT_STARTED = (SessionStatus.PENDING, SessionStatus.SCHEDULED)


async def fetch_logs(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    row: SessionRow,
    tail: int,
    timeout: float,
    poll: float,
) -> SessionLogs:
    """The last ``tail`` lines of the session's output.

    Ended sessions answer their kept logs and sessions not started yet empty logs, both at once;
    otherwise the session's agent is asked and awaited up to ``timeout`` seconds.
    """
    status = SessionStatus(row.status)
    if status in _NOT_STARTED:
        return SessionLogs(session_id=row.id, logs="")
    if status in FINAL:
        async with sessionmaker() as db:
            kept = await db.scalar(select(SessionRow.final_logs).where(SessionRow.id == row.id))
            await db.commit()
        return SessionLogs(session_id=row.id, logs=last_lines(kept or "", tail))
    async with sessionmaker() as db:
        request_id = await _ask(db, row, tail)
    deadline = time.monotonic() + timeout
    while True:
        uploaded = hub.logs.listen()
        async with sessionmaker() as db:
            done = await db.get(LogRequestRow, request_id)
            remaining = deadline - time.monotonic()
            if done is not None and done.completed_at is not None:
                await db.delete(done)
                await db.commit()
                return SessionLogs(
                    session_id=row.id, logs=done.content or "", truncated=done.truncated
                )
            if remaining <= 0:
                await db.execute(delete(LogRequestRow).where(LogRequestRow.id == request_id))
                await db.commit()
                raise AgentTimeout(
                    f"the agent of session {row.name} did not send its logs in time"
                )
        await wait_for(uploaded, min(poll, remaining))


async def upload_logs(db: AsyncSession, node_id: str, request_id: str, body: LogUpload) -> None:
    result = await db.execute(
        update(LogRequestRow)
        .where(
            LogRequestRow.id == request_id,
            LogRequestRow.node_id == node_id,
            LogRequestRow.completed_at.is_(None),
        )
        .values(content=body.logs, truncated=body.truncated, completed_at=utcnow())
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no open log request {request_id} for this node")
    wake_after_commit(db, "logs")
    await db.commit()


async def purge_stale(db: AsyncSession, older_than: timedelta) -> None:
    """Drop log requests nobody waits for any more (their user request timed out or went away)."""
    await db.execute(delete(LogRequestRow).where(LogRequestRow.created_at < utcnow() - older_than))
    await db.commit()


def last_lines(text: str, count: int) -> str:
    """The last ``count`` lines of ``text`` (a final newline does not start another line)."""
    start = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(count):
        start = text.rfind("\n", 0, start)
        if start < 0:
            return text
    return text[start + 1 :]


async def _ask(db: AsyncSession, row: SessionRow, tail: int) -> str:
    if row.node_id is None:
        raise Conflict(f"session {row.name} has no node, so no logs", code="no_logs")
    node_status = await db.scalar(select(NodeRow.status).where(NodeRow.id == row.node_id))
    if node_status != NodeStatus.ALIVE:
        raise Conflict(
            f"the node of session {row.name} is lost; its logs are unreachable", code="node_lost"
        )
    request = LogRequestRow(session_id=row.id, node_id=row.node_id, tail=tail)
    db.add(request)
    await db.execute(
        update(NodeRow)
        .where(NodeRow.id == row.node_id)
        .values(assignment_version=NodeRow.assignment_version + 1)
    )
    wake_after_commit(db, "node", row.node_id)
    await db.commit()
    return request.id
