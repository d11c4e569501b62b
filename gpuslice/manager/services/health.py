"""Liveness and readiness of this manager replica, for load balancers and service managers.

Ready means: the database answers (within `TIMEOUT_S`), its schema is at the revision this code
knows as head (a replica of older code next to a migrated database must not take traffic), and
the background loops that readiness waits on (scheduling, the lost-node sweep; `loop_table.py`
says which) go round. `loops_health` tells every loop's. Nothing here writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.health import Check, LoopHealth, LoopsHealth, Readiness
from gpuslice.manager.loops import Loop

TIMEOUT_S = 2.0


async def readiness(
    sessionmaker: async_sessionmaker[AsyncSession], head: str, loops: Mapping[str, Loop]
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
    for key, loop in loops.items():
        if loop.gates_readiness:
            checks[key] = Check(ok=loop.state.problem(now) is None, detail=loop.state.detail(now))
    ready = all(check.ok for check in checks.values())
    return Readiness(status="ready" if ready else "not_ready", checks=checks)


def loops_health(loops: Mapping[str, Loop]) -> LoopsHealth:
    now = time.monotonic()
    health = {key: _loop_health(loop, now) for key, loop in loops.items()}
    failing = any(not loop.ok for loop in health.values())
    return LoopsHealth(status="failing" if failing else "ok", loops=health)


def _loop_health(loop: Loop, now: float) -> LoopHealth:
    state = loop.state
    return LoopHealth(
        ok=state.problem(now) is None, detail=state.detail(now), running=state.running,
        readiness=loop.gates_readiness, interval=loop.interval, passes=state.passes,
        failures=state.failures, last_error=state.last_error or None,
        last_pass_at=state.last_pass_at,
    )


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
