"""Resource groups: each node is in one (``nodes.pool``); an admin moves a node to another."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.nodes import NodePublic
from gpuslice.common.schemas.projects import GroupPublic
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.errors import NotFound
from gpuslice.manager.events import Hub
from gpuslice.manager.scheduler import Node
from gpuslice.manager.services.nodes.views import public_node
from gpuslice.manager.services.scheduling.snapshot import alive_nodes


async def list_groups(db: AsyncSession) -> list[GroupPublic]:
    """Every group of the alive nodes with its free capacity: hardware only, never who uses
    it, so every user may see it (the launch dialog shows it)."""
    nodes = await alive_nodes(db)
    await db.commit()
    by_group: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        by_group[node.pool].append(node)
    return [_group(name, members) for name, members in sorted(by_group.items())]


async def set_group(db: AsyncSession, hub: Hub, node: str, group: str) -> NodePublic:
    """Move a node (by name or id) to ``group``: what runs on it stays; from the next pass only
    sessions that may use ``group`` are placed on it."""
    row = await db.scalar(select(NodeRow).where((NodeRow.name == node) | (NodeRow.id == node)))
    if row is None:
        raise NotFound(f"no node {node}", field="node")
    row.pool = group
    node_id = row.id
    await db.commit()
    hub.scheduler.set()  # waiting sessions may fit there now
    return await public_node(db, node_id)


def _group(name: str, nodes: list[Node]) -> GroupPublic:
    devices = [(n, d) for n in nodes for d in n.devices]
    return GroupPublic(
        name=name, nodes=len(nodes), gpus=len(devices),
        gpu_models=sorted({d.model for _, d in devices}),
        gpu_free=fgpu_decimal(sum(n.device_capacity - d.used for n, d in devices)),
        gpu_total=fgpu_decimal(sum(n.device_capacity for n, _ in devices)),
        largest_slice=fgpu_decimal(max((n.device_capacity - d.used for n, d in devices),
                                       default=0)),
        cpu_free=fgpu_decimal(sum(n.cpu - n.cpu_used for n in nodes)),
        mem_free=sum(n.mem - n.mem_used for n in nodes),
    )
