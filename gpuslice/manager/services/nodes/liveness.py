"""The sweep that marks silent nodes LOST and ends the sessions they held."""

from __future__ import annotations

import logging
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
