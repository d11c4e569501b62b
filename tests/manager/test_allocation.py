"""Applying a pass's placements: the devices the pass read are written only as they still are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine, make_sessionmaker
from gpuslice.manager.db.models import AllocationRow, DeviceRow, NodeRow, SessionRow, UserRow
from gpuslice.manager.events import Hub
from gpuslice.manager.scheduler import Placement, Policy, SchedulerConfig, Strategy, schedule
from gpuslice.manager.services.scheduling.allocation import (
    PlacementLost,
    apply_placement,
    apply_placements,
)
from gpuslice.manager.services.scheduling.snapshot import Snapshot, load_snapshot, queued_request

GiB = 1024**3


@pytest.fixture
async def maker(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine)
        yield make_sessionmaker(engine, Hub())
    finally:
        await engine.dispose()


async def test_a_placement_is_written_with_the_devices_the_pass_read(
    maker: async_sessionmaker[AsyncSession],
) -> None:
    await _seed(maker, sessions=2)
    snap = await _snapshot(maker)
    placements = _decide(snap)
    async with maker() as db:
        await apply_placements(
            db, [(p, snap.pending[p.request_id]) for p in placements], _names(snap), snap.devices
        )
        await db.commit()
        held = (await db.execute(
            select(AllocationRow.device_id, AllocationRow.device_uuid, AllocationRow.device_model,
                   AllocationRow.device_capacity, DeviceRow.id, DeviceRow.uuid, DeviceRow.used)
            .join(DeviceRow, DeviceRow.id == AllocationRow.device_id)
        )).all()
    assert len(held) == 2
    for device_id, uuid, model, capacity, row_id, row_uuid, used in held:
        assert (device_id, uuid, model, capacity) == (row_id, row_uuid, "Mock", 1000)
        assert used > 0


@pytest.mark.parametrize("batch", [False, True], ids=["one", "batch"])
async def test_a_device_gone_since_the_pass_read_it_loses_the_placement(
    maker: async_sessionmaker[AsyncSession], batch: bool
) -> None:
    await _seed(maker, sessions=1)
    snap = await _snapshot(maker)
    [placement] = _decide(snap)
    row = snap.pending[placement.request_id]
    async with maker() as db:  # the GPU is replaced: same index, another device
        [piece] = placement.slices
        await db.execute(delete(DeviceRow).where(DeviceRow.uuid == piece.uuid))
        node = await db.scalar(select(NodeRow))
        assert node is not None
        db.add(DeviceRow(node_id=node.id, index=piece.index, uuid="GPU-new", model="Mock",
                         mem=40 * GiB, sms=100, capacity=1000, used=0))
        await db.commit()
    async with maker() as db:
        with pytest.raises(PlacementLost, match="is gone|less"):
            if batch:
                await apply_placements(db, [(placement, row)], _names(snap), snap.devices)
            else:
                await apply_placement(db, placement, row, "n0", snap.devices)
        await db.rollback()
        assert (await db.scalar(select(NodeRow.cpu_used))) == 0
        assert (await db.scalar(select(DeviceRow.used).where(DeviceRow.uuid == "GPU-new"))) == 0
        assert (await db.scalar(select(SessionRow.status))) == "PENDING"


async def _seed(maker: async_sessionmaker[AsyncSession], sessions: int) -> None:
    now = datetime.now(UTC)
    async with maker() as db:
        user = UserRow(username="u", password_hash="-", role="user", is_active=True)
        node = NodeRow(name="n0", credential_hash="0" * 64, status="ALIVE", device_capacity=1000,
                       cpu=64_000, mem=512 * GiB, images=[], usage={}, last_heartbeat_at=now)
        db.add_all([user, node])
        await db.flush()
        db.add_all([
            DeviceRow(node_id=node.id, index=i, uuid=f"GPU-{i}", model="Mock", mem=40 * GiB,
                      sms=100, capacity=1000, used=0)
            for i in range(2)
        ])
        db.add_all([
            SessionRow(name=f"s{i}", owner_id=user.id, image="python:3.11", type="batch",
                       gpu=1000, cpu=1000, mem=GiB, status="PENDING", status_reason="")
            for i in range(sessions)
        ])
        await db.commit()


async def _snapshot(maker: async_sessionmaker[AsyncSession]) -> Snapshot:
    async with maker() as db:
        return await load_snapshot(db)


def _decide(snap: Snapshot) -> list[Placement]:
    requests = [queued_request(row) for row in snap.pending.values()]
    config = SchedulerConfig(Policy.FIFO, Strategy.SPREAD)
    return schedule(requests, snap.nodes, snap.users, config, 0.0).placements


def _names(snap: Snapshot) -> dict[str, str]:
    return {n.id: n.name for n in snap.nodes}
