"""Guarded allocation: a placement is written only if every slice still fits, in one transaction.

Each capacity counter is moved by a conditional UPDATE that checks the room in the same statement
(``SET used = used + :x WHERE id = :id AND used + :x <= capacity``) and the session by
``transition()`` (``WHERE status = 'PENDING'``). On PostgreSQL a concurrent writer waits on the
row lock and then re-evaluates the WHERE on the committed row, so of two managers placing into
the same slice exactly one sees rowcount 1; the other rolls its placement back. Check constraints
on the counters are a second line of defence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import AllocationRow, DeviceRow, NodeRow, SessionRow
from gpuslice.manager.scheduler import DeviceSlice, Placement
from gpuslice.manager.services.lifecycle import transition, transition_many


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device's row as the pass read it with the nodes, so that applying the pass reads no
    device again. The guards below still check the row as it is when they write."""

    id: int
    uuid: str
    model: str
    capacity: int


# (node id, device index) -> the device's row
DeviceRefs = dict[tuple[str, int], DeviceRef]


class PlacementLost(Exception):
    """Some capacity of the placement is gone (another scheduler took it); nothing was written."""


async def apply_placement(
    db: AsyncSession, placement: Placement, row: SessionRow, node_name: str, devices: DeviceRefs
) -> None:
    """Allocate ``placement`` for the PENDING session ``row`` inside the caller's transaction;
    ``devices``: the rows of the devices the pass saw.

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
    slices = [(_device(devices, placement.node_id, piece), piece) for piece in placement.slices]
    allocations = []
    for device, piece in sorted(slices, key=lambda s: s[0].id):
        ok = await db.execute(
            update(DeviceRow)
            .where(DeviceRow.id == device.id, DeviceRow.used + piece.gpu <= DeviceRow.capacity)
            .values(used=DeviceRow.used + piece.gpu)
        )
        if ok.rowcount != 1:  # type: ignore[attr-defined]
            raise PlacementLost(f"device {device.uuid} has less than the slice free")
        allocations.append(_allocation(row.id, device, piece))
    if allocations:
        await db.execute(insert(AllocationRow), allocations)
    # gpu: a session asked by GPU memory holds the slice chosen on its device from now on
    await transition(
        db, row, SessionStatus.SCHEDULED, f"scheduled on node {node_name}",
        node_id=placement.node_id, gpu=res.gpu,
    )


async def apply_placements(
    db: AsyncSession, placed: Sequence[tuple[Placement, SessionRow]], names: dict[str, str],
    devices: DeviceRefs,
) -> None:
    """Allocate many placements inside the caller's transaction, in a few statements: all of
    them, or ``PlacementLost`` / ``StaleStatus`` (the caller rolls back; nothing is kept).

    The same guards as ``apply_placement``, over each counter's total for the batch: one
    conditional UPDATE for the nodes and one for the devices, each returning the rows it
    changed, so a single counter without room fails the whole batch. Rows are locked nodes,
    then devices, each in id order, then the PENDING sessions (the lock order of
    placements), so two schedulers' batches wait on each other instead of deadlocking.
    """
    if not placed:
        return
    per_node: dict[str, list[int]] = {}
    for placement, _row in placed:
        total = per_node.setdefault(placement.node_id, [0, 0])
        total[0] += placement.resources.cpu
        total[1] += placement.resources.mem
    await _lock(db, NodeRow, NodeRow.id, sorted(per_node))
    cpu, mem = (case({n: t[i] for n, t in per_node.items()}, value=NodeRow.id) for i in (0, 1))
    nodes_ok = (await db.execute(
        update(NodeRow)
        .where(NodeRow.id.in_(list(per_node)), NodeRow.status == "ALIVE",
               NodeRow.cpu_used + cpu <= NodeRow.cpu, NodeRow.mem_used + mem <= NodeRow.mem)
        .values(cpu_used=NodeRow.cpu_used + cpu, mem_used=NodeRow.mem_used + mem)
        .returning(NodeRow.id)
    )).scalars().all()
    if len(nodes_ok) != len(per_node):
        raise PlacementLost(f"{len(per_node) - len(nodes_ok)} node(s) have no room left")
    per_device: dict[int, int] = {}
    for placement, _row in placed:
        for piece in placement.slices:
            device = _device(devices, placement.node_id, piece)
            per_device[device.id] = per_device.get(device.id, 0) + piece.gpu
    if per_device:
        await _lock(db, DeviceRow, DeviceRow.id, sorted(per_device))
        gpu = case(per_device, value=DeviceRow.id)
        devices_ok = (await db.execute(
            update(DeviceRow)
            .where(DeviceRow.id.in_(list(per_device)), DeviceRow.used + gpu <= DeviceRow.capacity)
            .values(used=DeviceRow.used + gpu)
            .returning(DeviceRow.id)
        )).scalars().all()
        if len(devices_ok) != len(per_device):
            raise PlacementLost(f"{len(per_device) - len(devices_ok)} device(s) have less free")
        await db.execute(insert(AllocationRow), [
            _allocation(row.id, _device(devices, placement.node_id, piece), piece)
            for placement, row in placed for piece in placement.slices
        ])
    await transition_many(db, [row for _p, row in placed], SessionStatus.SCHEDULED, [
        {"reason": f"scheduled on node {names[p.node_id]}", "node_id": p.node_id,
         "gpu": p.resources.gpu}
        for p, _row in placed
    ])


async def _lock(db: AsyncSession, table: type[Any], key: Any, ids: list[Any]) -> None:
    # PostgreSQL: row locks taken in id order (SQLite has one writer at a time: no-op there)
    if db.get_bind().dialect.name == "postgresql":
        await db.execute(select(key).where(key.in_(ids)).order_by(key).with_for_update())


def _device(devices: DeviceRefs, node_id: str, piece: DeviceSlice) -> DeviceRef:
    device = devices.get((node_id, piece.index))
    if device is None or device.uuid != piece.uuid:
        raise PlacementLost(f"device {piece.uuid} of node {node_id} is gone")
    return device


def _allocation(session_id: str, device: DeviceRef, piece: DeviceSlice) -> dict[str, Any]:
    return {
        "session_id": session_id, "device_id": device.id, "device_index": piece.index,
        "device_uuid": piece.uuid, "device_model": device.model,
        "device_capacity": device.capacity, "gpu": piece.gpu, "mem": piece.mem,
        "sms": piece.sms,
    }
