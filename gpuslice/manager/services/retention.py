"""Retention: what the manager stops keeping, ``sessions.retention_days`` after it stopped
mattering. Run by a supervised loop; each pass does a bounded amount of work.

- An ended session's bulky data (its kept final logs, up to 1 MiB, and its environment, which
  may hold secrets) is purged and ``purged_at`` set; the row, its result and its whole status
  history stay, so history and accounting are unchanged.
- API and login tokens expired or revoked that long ago, and join tokens used, expired or
  revoked that long ago, are deleted (their hashes are worthless, but rows add up: every login
  makes one).
- Login-failure counters are deleted as soon as their window has passed (``auth.login_window``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.sessions import FINAL
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, JoinTokenRow, LoginFailureRow, SessionRow

BATCH = 500  # sessions purged per pass: no pass holds the database for long


@dataclass(frozen=True, slots=True)
class Purged:
    sessions: int
    tokens: int
    join_tokens: int
    login_failures: int


async def purge(
    sessionmaker: async_sessionmaker[AsyncSession], days: int, login_window: float
) -> Purged:
    """One pass; ``days`` 0 keeps everything but the login-failure counters."""
    async with sessionmaker() as db:
        failures = await _rowcount(db, delete(LoginFailureRow).where(
            LoginFailureRow.window_start < utcnow() - timedelta(seconds=login_window)
        ))
        if days <= 0:
            await db.commit()
            return Purged(0, 0, 0, failures)
        cutoff = utcnow() - timedelta(days=days)
        sessions = await _purge_sessions(db, cutoff)
        tokens = await _rowcount(db, delete(ApiTokenRow).where(
            or_(ApiTokenRow.expires_at < cutoff, ApiTokenRow.revoked_at < cutoff)
        ))
        join_tokens = await _rowcount(db, delete(JoinTokenRow).where(
            or_(JoinTokenRow.used_at < cutoff, JoinTokenRow.expires_at < cutoff,
                JoinTokenRow.revoked_at < cutoff)
        ))
        await db.commit()
    return Purged(sessions, tokens, join_tokens, failures)


async def _purge_sessions(db: AsyncSession, cutoff: object) -> int:
    ids = list(await db.scalars(
        select(SessionRow.id).where(
            SessionRow.status.in_(list(FINAL)), SessionRow.updated_at < cutoff,
            SessionRow.purged_at.is_(None),
        ).limit(BATCH)
    ))
    if not ids:
        return 0
    await db.execute(
        update(SessionRow).where(SessionRow.id.in_(ids))
        .values(final_logs=None, env={}, purged_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return len(ids)


async def _rowcount(db: AsyncSession, statement: object) -> int:
    result = await db.execute(statement)  # type: ignore[call-overload]
    return int(result.rowcount or 0)
