"""Guarded allocation: a placement is written only if every slice still fits, in one transaction.

Each capacity counter is moved by a conditional UPDATE that checks the room in the same statement
(``SET used = used + :x WHERE id = :id AND used + :x <= capacity``) and the session by
``transition()`` (``WHERE status = 'PENDING'``). On PostgreSQL a concurrent writer waits on the
row lock and then re-evaluates the WHERE on the committed row, so of two managers placing into
the same slice exactly one sees rowcount 1; the other rolls its placement back. Check constraints
on the counters are a second line of defence.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import Allocation, DeviceRow, NodeRow, SessionRow
from gpuslice.manager.scheduler import Placement
from gpuslice.manager.services.lifecycle import transition


class PlacementLost(Exception):
    """Some capacity of the placement is gone (another scheduler took it); nothing was written."""


async def apply_placement(
    db: AsyncSession, placement: Placement, row: SessionRow, node_name: str
) -> None:
    """Allocate ``placement`` for the PENDING session ``row`` inside the caller's transaction.

    Raises ``PlacementLost`` (the caller rolls back) when a guard fails; ``StaleStatus`` when the
    session is no longer PENDING.
    """
    res = placement.resources
    node_ok = await db.execute(
        update(NodeRow)
        .where(
            NodeRow.id == placement.node_id,
            NodeRow.status == "ALIVE",
            NodeRow.cpu_used + res.cpu <= NodeRow.cpu,
            NodeRow.mem_used + res.mem <= NodeRow.mem,
        )
        .values(cpu_used=NodeRow.cpu_used + res.cpu, mem_used=NodeRow.mem_used + res.mem)
    )
    if node_ok.rowcount != 1:  # type: ignore[attr-defined]
        raise PlacementLost(f"node {placement.node_id} has no room left or is gone")
    devices = await _device_rows(db, placement)
    allocations = []
    for piece in sorted(placement.slices, key=lambda s: devices[s.index].id):
        device = devices[piece.index]
        ok = await db.execute(
            update(DeviceRow)
            .where(DeviceRow.id == device.id, DeviceRow.used + piece.gpu <= DeviceRow.capacity)
            .values(used=DeviceRow.used + piece.gpu)
        )
        if ok.rowcount != 1:  # type: ignore[attr-defined]
            raise PlacementLost(f"device {device.uuid} has less than the slice free")
        allocations.append(
            {
                "session_id": row.id, "device_id": device.id, "device_index": piece.index,
                "device_uuid": piece.uuid, "device_model": device.model,
                "device_capacity": device.capacity, "gpu": piece.gpu, "mem": piece.mem,
                "sms": piece.sms,
            }
        )
    if allocations:
        await db.execute(insert(Allocation), allocations)
    # gpu: a session asked by GPU memory holds the slice chosen on its device from now on
    await transition(
        db, row, SessionStatus.SCHEDULED, f"scheduled on node {node_name}",
        node_id=placement.node_id, gpu=res.gpu,
    )


async def _device_rows(db: AsyncSession, placement: Placement) -> dict[int, DeviceRow]:
    if not placement.slices:
        return {}
    indexes = [s.index for s in placement.slices]
    rows = (
        await db.scalars(
            select(DeviceRow).where(
                DeviceRow.node_id == placement.node_id, DeviceRow.index.in_(indexes)
            )
        )
    ).all()
    found = {d.index: d for d in rows}
    missing = set(indexes) - found.keys()
    if missing:
        raise PlacementLost(f"devices {sorted(missing)} of node {placement.node_id} are gone")
    return found

