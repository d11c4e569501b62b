"""Session logs: kept once a session ended, else asked of the node's agent.

Only a session that may have a container asks its agent (a ``logs`` request on the channel).
One that has not started yet has no output; one that has ended answers the logs its agent sent
with the final state report (``sessions.final_logs``), so they outlive the container and the
node.

An agent tells a session's end as soon as its processes are gone, before dockerd has cleaned
its container up, and only then can it read the container's logs: they come in a report of
their own, a moment after the end. A reader asking in that moment waits for them (up to
``LATE_LOGS_S`` after the end), so `gpuslice run` printing the last lines of a run that just
ended still gets them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import select

from gpuslice.common.schemas.agents import LogsAnswer, LogsAsk
from gpuslice.common.schemas.sessions import FINAL, SessionLogs, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import Conflict
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.sessions import agent

_NOT_STARTED = (SessionStatus.PENDING, SessionStatus.SCHEDULED)
LATE_LOGS_S = 3.0  # after an end: how long its logs may still be on their way
_LATE_LOGS_POLL_S = 0.05


async def fetch_logs(channel: Channel, row: SessionRow, tail: int, timeout: float) -> SessionLogs:
    """The last ``tail`` lines of the session's output.

    Ended sessions answer their kept logs and sessions not started yet empty logs, both at once;
    otherwise the session's agent is asked and awaited up to ``timeout`` seconds.
    """
    status = SessionStatus(row.status)
    if status in _NOT_STARTED:
        return SessionLogs(session_id=row.id, logs="")
    if status in FINAL:
        kept = await _kept_logs(channel, row)
        return SessionLogs(session_id=row.id, logs=last_lines(kept or "", tail),
                           purged=row.purged_at is not None)
    if row.node_id is None:
        raise Conflict(f"session {row.name} has no node, so no logs", code="no_logs")
    done = await agent.ask(
        channel, row, LogsAsk(tail=tail), LogsAnswer, timeout=timeout,
        late="send its logs in time",
    )
    return SessionLogs(session_id=row.id, logs=done.logs, truncated=done.truncated)


async def _kept_logs(channel: Channel, row: SessionRow) -> str | None:
    """The ended session's kept logs; just after an end its agent reported, they may be on
    their way (see the module's note): waited for, up to ``LATE_LOGS_S`` after the end."""
    due = row.updated_at + timedelta(seconds=LATE_LOGS_S)
    while True:
        async with channel.sessionmaker() as db:
            kept = await db.scalar(select(SessionRow.final_logs).where(SessionRow.id == row.id))
            await db.commit()
        if kept is not None or row.node_id is None or row.purged_at is not None:
            return kept
        left = (due - utcnow()).total_seconds()
        if left <= 0:
            return None
        await asyncio.sleep(min(_LATE_LOGS_POLL_S, left))


def last_lines(text: str, count: int) -> str:
    """The last ``count`` lines of ``text`` (a final newline does not start another line)."""
    start = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(count):
        start = text.rfind("\n", 0, start)
        if start < 0:
            return text
    return text[start + 1 :]
