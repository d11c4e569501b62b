"""Monitoring's background loops, started with the app: history maintenance and reclaim."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.loops import supervise
from gpuslice.manager.services.monitoring.maintenance import Retention, maintain
from gpuslice.manager.services.monitoring.reclaim import reclaim_pass
from gpuslice.manager.settings import ManagerSettings


def start(
    sessionmaker: async_sessionmaker[AsyncSession], settings: ManagerSettings
) -> list[asyncio.Task[None]]:
    config = settings.monitoring
    retention = Retention(config.minute_retention_days, config.hour_retention_days)
    max_gap = timedelta(seconds=settings.nodes.node_timeout)

    async def maintenance() -> None:
        await maintain(sessionmaker, retention, utcnow())

    async def reclaim() -> None:
        await reclaim_pass(sessionmaker, max_gap)

    return [
        asyncio.create_task(
            supervise("usage history", maintenance, interval=config.maintenance_interval),
            name="gpuslice-usage-history",
        ),
        asyncio.create_task(
            supervise("idle reclaim", reclaim, interval=config.reclaim_interval),
            name="gpuslice-idle-reclaim",
        ),
    ]
