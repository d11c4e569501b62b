"""The live view: per node and device, who holds which slice and how much of it they use.

Admins see every node, its devices' totals (every process on them) and every session; a user
sees only the nodes and devices their own sessions are on, with their own sessions' figures
and nothing about anyone else's (no device totals, no allocated amounts).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.monitoring import Top, TopDevice, TopNode, TopSlice
from gpuslice.common.schemas.sessions import HOLDING, ReclaimPublic, SessionStatus
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import AllocationRow, NodeRow, SessionRow, UsageSeriesRow, UserRow
from gpuslice.manager.services.monitoring.idle import Reclaim
from gpuslice.manager.services.monitoring.metrics import device_readings
from gpuslice.manager.services.monitoring.reclaim import decisions
from gpuslice.manager.services.sessions.views import visible


async def top(db: AsyncSession, viewer: UserRow, max_gap: timedelta) -> Top:
    now = utcnow()
    admin = viewer.role == Role.ADMIN
    sessions = (await db.execute(visible(
        select(SessionRow, UserRow.username, UsageSeriesRow)
        .join(UserRow, UserRow.id == SessionRow.owner_id)
        .outerjoin(UsageSeriesRow, UsageSeriesRow.session_id == SessionRow.id)
        .where(SessionRow.status.in_(list(HOLDING)), SessionRow.node_id.is_not(None))
        .options(selectinload(SessionRow.allocations)), viewer,
    ))).all()
    reclaims = dict(await decisions(db, now, max_gap, [s.id for s, _, _ in sessions]))
    node_ids = None if admin else {s.node_id for s, _, _ in sessions}
    query = select(NodeRow).options(selectinload(NodeRow.devices)).order_by(NodeRow.name)
    if node_ids is not None:
        query = query.where(NodeRow.id.in_(node_ids))
    nodes = (await db.scalars(query)).all()
    await db.commit()
    on_device: dict[str, list[TopSlice]] = defaultdict(list)
    cpu_only: dict[str, list[TopSlice]] = defaultdict(list)
    for row, username, series in sessions:
        held = [a for a in row.allocations if a.released_at is None]
        for alloc in held:
            on_device[alloc.device_uuid].append(_slice(row, username, series, alloc, reclaims))
        if not held:
            cpu_only[row.node_id or ""].append(_slice(row, username, series, None, reclaims))
    return Top(at=now, nodes=[_node(n, on_device, cpu_only, admin) for n in nodes
                              if admin or n.id in (node_ids or ())])


def _node(
    node: NodeRow, on_device: dict[str, list[TopSlice]], cpu_only: dict[str, list[TopSlice]],
    admin: bool,
) -> TopNode:
    readings = device_readings(node.usage) if admin else {}
    devices = [
        TopDevice(
            index=d.index, uuid=d.uuid, model=d.model, mem=d.mem,
            mem_used=readings.get(d.index, (None, None))[0],
            utilization=readings.get(d.index, (None, None))[1],
            capacity=fgpu_decimal(d.capacity), used=fgpu_decimal(d.used) if admin else None,
            slices=on_device.get(d.uuid, []),
        )
        for d in node.devices
        if admin or on_device.get(d.uuid)
    ]
    return TopNode(
        id=node.id, name=node.name, status=node.status, last_heartbeat_at=node.last_heartbeat_at,
        cpu=fgpu_decimal(node.cpu), cpu_used=fgpu_decimal(node.cpu_used) if admin else None,
        mem=node.mem, mem_used=node.mem_used if admin else None, devices=devices,
        cpu_only=cpu_only.get(node.id, []),
    )


def _slice(
    row: SessionRow, username: str, series: UsageSeriesRow | None, alloc: AllocationRow | None,
    reclaims: dict[str, Reclaim],
) -> TopSlice:
    gpu = next((g for g in (series.gpus or []) if alloc and g.get("uuid") == alloc.device_uuid),
               None) if series is not None else None
    reclaim = reclaims.get(row.id)
    return TopSlice(
        session_id=row.id, name=row.name, user=username, status=SessionStatus(row.status),
        fgpu=fgpu_decimal(alloc.gpu if alloc else row.gpu),
        gpu_mem=gpu.get("mem_used") if gpu else None,
        gpu_util=gpu.get("utilization") if gpu else None,
        cpu=Decimal(series.cpu) / 1000 if series is not None and series.cpu is not None else None,
        cpu_alloc=fgpu_decimal(row.cpu), mem=series.mem if series is not None else None,
        mem_alloc=row.mem,
        reclaim=None if reclaim is None else ReclaimPublic(
            at=reclaim.at, kind=reclaim.kind, reason=reclaim.reason
        ),
    )
