"""Session logs: kept once a session ended, else fetched from the node's agent.

A log request is a row that rides to the agent on its assignments (``agent_requests``); the agent
uploads the tail with ``PUT /api/v1/agents/me/logs/{request_id}`` and the waiting user request
returns it.

Only a session that may have a container asks its agent. One that has not started yet has no
output; one that has ended answers the logs its agent sent with the final state report
(``sessions.final_logs``), so they outlive the container and the node.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import LogUpload
from gpuslice.common.schemas.sessions import FINAL, SessionLogs, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LogRequestRow, SessionRow
from gpuslice.manager.errors import AgentTimeout, Conflict
from gpuslice.manager.events import Hub
from gpuslice.manager.services import agent_requests

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
    if row.node_id is None:
        raise Conflict(f"session {row.name} has no node, so no logs", code="no_logs")
    async with sessionmaker() as db:
        request = LogRequestRow(session_id=row.id, node_id=row.node_id, tail=tail)
        request_id = await agent_requests.send(db, row, request)
    done = await agent_requests.await_answer(
        sessionmaker, hub.logs, LogRequestRow, request_id, timeout, poll
    )
    if done is None:
        raise AgentTimeout(f"the agent of session {row.name} did not send its logs in time")
    return SessionLogs(session_id=row.id, logs=done.content or "", truncated=done.truncated)


async def upload_logs(db: AsyncSession, node_id: str, request_id: str, body: LogUpload) -> None:
    await agent_requests.answer(
        db, LogRequestRow, node_id, request_id, "logs", content=body.logs,
        truncated=body.truncated,
    )


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
