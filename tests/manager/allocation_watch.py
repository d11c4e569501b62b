"""The race tests' lookout: while schedulers race on one database, the allocations are
sampled over and over, and every device found holding more than its capacity is noted."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.models import AllocationRow, DeviceRow


async def watch_allocations(
    maker: async_sessionmaker[AsyncSession], over: list[str], done: asyncio.Event
) -> None:
    """Sample the allocations during the race: no device may ever hold more than its capacity."""
    while not done.is_set():
        async with maker() as db:
            rows = await db.execute(
                select(DeviceRow.uuid, DeviceRow.capacity, func.sum(AllocationRow.gpu))
                .join(AllocationRow, AllocationRow.device_id == DeviceRow.id)
                .where(AllocationRow.released_at.is_(None))
                .group_by(DeviceRow.id)
            )
            over.extend(f"{uuid}: {held}/{cap}" for uuid, cap, held in rows if held > cap)
        await asyncio.sleep(0.005)
