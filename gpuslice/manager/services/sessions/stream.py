"""The status stream: status-history rows as they are appended, for the sessions one may see.

It reads the history table (not process memory), so it works against any manager replica and
resumes from an event id. Caveat on PostgreSQL: ids come from a sequence, so a transaction that
took a lower id but commits later than a higher one can be passed over; clients that need every
change re-read the session (``GET /api/v1/sessions/{id}`` has the full history).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.sessions import StatusChange
from gpuslice.common.waits import wait_event
from gpuslice.manager.db.models import StatusHistoryRow, UserRow
from gpuslice.manager.events import Hub
from gpuslice.manager.services.sessions.views import change_of, visible_history

BATCH = 500


async def status_changes(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    viewer: UserRow,
    *,
    since: int | None,
    session_id: str | None,
    poll: float,
) -> AsyncIterator[StatusChange]:
    """Changes after event ``since`` (default: from now on), until the caller stops it or the
    server shuts down."""
    if since is None:
        async with sessionmaker() as db:
            since = await db.scalar(select(func.max(StatusHistoryRow.id))) or 0
    while not hub.closing.is_set():
        appended = hub.history.listen()
        async with sessionmaker() as db:
            stmt = visible_history(select(StatusHistoryRow), viewer).where(
                StatusHistoryRow.id > since
            )
            if session_id is not None:
                stmt = stmt.where(StatusHistoryRow.session_id == session_id)
            rows = (await db.scalars(stmt.order_by(StatusHistoryRow.id).limit(BATCH))).all()
        for row in rows:
            since = row.id
            yield change_of(row)
        if len(rows) < BATCH:
            await wait_event(appended, poll)
