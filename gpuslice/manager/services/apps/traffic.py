"""People's traffic to a session's terminal and apps counts as use of the session.

Idle rules read ``sessions.last_activity_at`` (``services/sessions/activity.py``). The proxy
sees every request and message, so :class:`ActivityMeter` writes at most once per session per
``activity.EVERY`` from this process, off the request's path (a write per request would cost
the proxy's latency more than everything else it does).
"""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.services.sessions import activity

log = logging.getLogger(__name__)
_MAX_TRACKED = 10_000


class ActivityMeter:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.sessionmaker = sessionmaker
        self.every = activity.EVERY.total_seconds()
        self._last: dict[str, float] = {}
        self._writing: set[asyncio.Task[None]] = set()

    def touch(self, session_id: str) -> None:
        """A person used the session just now."""
        now = time.monotonic()
        if now - self._last.get(session_id, -self.every) < self.every:
            return
        if len(self._last) >= _MAX_TRACKED:
            self._last = {k: v for k, v in self._last.items() if now - v < self.every}
        self._last[session_id] = now
        task = asyncio.get_running_loop().create_task(self._record(session_id))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _record(self, session_id: str) -> None:
        try:
            async with self.sessionmaker() as db:
                await activity.record(db, session_id)
        except Exception as exc:  # a busy database must not break anyone's stream
            log.warning("could not note the use of session %s: %s", session_id, exc)

    async def close(self) -> None:
        await asyncio.gather(*self._writing, return_exceptions=True)
