"""Liveness and readiness of this manager replica, for load balancers and service managers.

Ready means: the database answers (within `TIMEOUT_S`), its schema is at the revision this code
knows as head (a replica of older code next to a migrated database must not take traffic), and
the background loops (scheduling, the lost-node sweep) go round. Nothing here writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.health import Check, Readiness
from gpuslice.manager.loops import LoopState

TIMEOUT_S = 2.0


async def readiness(
    sessionmaker: async_sessionmaker[AsyncSession], head: str, loops: Mapping[str, LoopState]
) -> Readiness:
    checks: dict[str, Check] = {}
    try:
        revisions = await asyncio.wait_for(_revisions(sessionmaker), TIMEOUT_S)
        checks["database"] = Check(ok=True, detail="reachable")
        checks["migrations"] = _migrations(revisions, head)
    except Exception as exc:  # any failure to answer is "not ready", with what happened
        reason = "no answer" if isinstance(exc, TimeoutError) else type(exc).__name__
        checks["database"] = Check(ok=False, detail=f"unreachable: {reason}"[:300])
        checks["migrations"] = Check(ok=False, detail="unknown (database unreachable)")
    now = time.monotonic()
    for key, state in loops.items():
        problem = state.problem(now)
        checks[key] = Check(ok=problem is None, detail=problem or
                            f"ran {now - state.beat:.1f} s ago ({state.passes} passes)")
    ready = all(check.ok for check in checks.values())
    return Readiness(status="ready" if ready else "not_ready", checks=checks)


async def _revisions(sessionmaker: async_sessionmaker[AsyncSession]) -> set[str]:
    async with sessionmaker() as db:
        try:
            rows = await db.scalars(text("SELECT version_num FROM alembic_version"))
            return set(rows)
        except Exception:
            await db.rollback()
            await db.execute(text("SELECT 1"))  # reachable, but never migrated
            return set()


def _migrations(revisions: set[str], head: str) -> Check:
    if revisions == {head}:
        return Check(ok=True, detail=f"revision {head} (head)")
    found = ", ".join(sorted(revisions)) or "none"
    return Check(ok=False, detail=f"database at revision {found}; this manager's head is {head}")
