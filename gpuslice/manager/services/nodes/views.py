"""Nodes as admins see them: capacity, devices and what is allocated on each."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.common.schemas.nodes import DevicePublic, NodePublic
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.errors import NotFound


async def list_nodes(db: AsyncSession) -> list[NodePublic]:
    rows = await db.scalars(
        select(NodeRow).options(selectinload(NodeRow.devices)).order_by(NodeRow.name)
    )
    return [_public(n) for n in rows]


async def public_node(db: AsyncSession, node_id: str) -> NodePublic:
    row = await db.scalar(
        select(NodeRow).where(NodeRow.id == node_id).options(selectinload(NodeRow.devices))
    )
    await db.commit()
    if row is None:
        raise NotFound(f"no node {node_id}", field="node_id")
    return _public(row)


def _public(row: NodeRow) -> NodePublic:
    return NodePublic(
        id=row.id, name=row.name, pool=row.pool, status=NodeStatus(row.status),
        revoked_at=row.revoked_at,
        cpu=fgpu_decimal(row.cpu), mem=row.mem, cpu_used=fgpu_decimal(row.cpu_used),
        mem_used=row.mem_used, fgpu_per_gpu=fgpu_decimal(row.device_capacity),
        devices=[
            DevicePublic(
                index=d.index, uuid=d.uuid, model=d.model, mem=d.mem, sms=d.sms,
                capacity=fgpu_decimal(d.capacity), used=fgpu_decimal(d.used),
            )
            for d in row.devices
        ],
        images=row.images, last_heartbeat_at=row.last_heartbeat_at,
        registered_at=row.registered_at, engine_error=row.engine_error,
    )
