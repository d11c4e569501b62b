"""When a person last used a session through the platform (its terminal, its apps).

Whatever relays a person's traffic to a session calls :func:`record`; idle rules read
``sessions.last_activity_at`` (NULL: no use seen, which an idle rule treats as unknown, never
as idle). Traffic is continuous, so the column is written at most every ``EVERY``: one UPDATE
that changes nothing when the last write is recent enough.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import SessionRow

EVERY = timedelta(seconds=30)


async def record(db: AsyncSession, session_id: str, at: datetime | None = None) -> bool:
    """Note a use of the session at ``at`` (now); commits. True when the column was written."""
    at = at or utcnow()
    result = await db.execute(
        update(SessionRow)
        .where(
            SessionRow.id == session_id,
            or_(SessionRow.last_activity_at.is_(None), SessionRow.last_activity_at <= at - EVERY),
        )
        .values(last_activity_at=at)
        .execution_options(synchronize_session=False)
    )
    await db.commit()
    return bool(result.rowcount)  # type: ignore[attr-defined]
