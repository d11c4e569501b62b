"""The sweep that marks silent nodes LOST and ends the sessions they held."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NodeRow, SessionRow
from gpuslice.manager.errors import StaleStatus
from gpuslice.manager.services.lifecycle import transition

log = logging.getLogger(__name__)
NODE_LOST = "node lost"
# A difference this large between wall-clock and monotonic time passed since the last look is
# a jump of the wall clock (NTP stepping it, a VM resumed, an admin's `date -s`), not drift.
CLOCK_JUMP_S = 2.0


class SweepGrace:
    """Whether heartbeat times may be judged now. They are wall-clock times in the database;
    just after this manager starts, and for one ``timeout`` after the wall clock jumps, every
    node looks silent for as long as the gap or the jump, though none is. Durations are
    measured here in monotonic time, which never jumps."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._until = time.monotonic() + timeout
        self._last = (time.monotonic(), time.time())

    def allows_sweep(self) -> bool:
        mono, wall = time.monotonic(), time.time()
        jump = (wall - self._last[1]) - (mono - self._last[0])
        self._last = (mono, wall)
        if abs(jump) > CLOCK_JUMP_S:
            log.warning("the wall clock jumped %+.0f s: nodes get %.0f s to heartbeat before "
                        "any is called lost", jump, self.timeout)
            self._until = mono + self.timeout
        return mono >= self._until


async def sweep_lost(sessionmaker: async_sessionmaker[AsyncSession], timeout: float) -> int:
    """Mark nodes silent for ``timeout`` seconds LOST (one UPDATE), then end their sessions.

    Returns how many nodes were lost now. Sessions still holding capacity on any LOST node go to
    ERROR "node lost" (which releases it), so a crash between the two steps heals next time.
    """
    cutoff = utcnow() - timedelta(seconds=timeout)
    async with sessionmaker() as db:
        lost = (
            await db.execute(
                update(NodeRow)
                .where(NodeRow.status == NodeStatus.ALIVE, NodeRow.last_heartbeat_at < cutoff)
                .values(status=NodeStatus.LOST)
                .returning(NodeRow.id, NodeRow.name)
            )
        ).all()
        await db.commit()
        for node_id, name in lost:
            log.warning("node %s missed its heartbeats for %.0f s: LOST", name, timeout,
                        extra={"node_id": node_id})
        stranded = (
            await db.scalars(
                select(SessionRow)
                .join(NodeRow, NodeRow.id == SessionRow.node_id)
                .where(NodeRow.status == NodeStatus.LOST, SessionRow.status.in_(list(HOLDING)))
            )
        ).all()
        await db.commit()
        db.expunge_all()
        for row in stranded:
            try:
                await transition(db, row, SessionStatus.ERROR, NODE_LOST)
                await db.commit()
            except StaleStatus:  # it ended meanwhile: nothing left to release
                await db.rollback()
    return len(lost)
