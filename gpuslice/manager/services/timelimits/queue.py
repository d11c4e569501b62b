"""What the scheduling pass needs of time limits: sessions not yet due to start (``--begin``)
kept out of the queue with their reason, and what runs on each node with its end (backfill)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import HOLDING
from gpuslice.manager.db.models import AllocationRow, SessionRow
from gpuslice.manager.scheduler import Node, Running, WaitCode, Waiting
from gpuslice.manager.scheduler.reasons import begin_reason


def not_yet(rows: Iterable[SessionRow], now: datetime) -> dict[str, Waiting]:
    """The PENDING sessions whose start is still ahead, each with its reason (no position: it
    is not in the queue yet)."""
    out = {}
    for row in rows:
        if row.begin_at is not None and row.begin_at > now:
            out[row.id] = Waiting(row.id, WaitCode.BEGIN, begin_reason(row.begin_at, now), 0)
    return out


async def attach_running(db: AsyncSession, nodes: list[Node], now: datetime) -> None:
    """Each node's ``running``: its allocated sessions, each ending by its time limit (when it
    is RUNNING, its ``ends_at``; before, now plus its limit; without a limit, never known)."""
    rows = await db.execute(
        select(SessionRow.id, SessionRow.node_id, SessionRow.cpu, SessionRow.mem,
               SessionRow.time_limit, SessionRow.ends_at, AllocationRow.device_index,
               AllocationRow.gpu)
        .outerjoin(AllocationRow, (AllocationRow.session_id == SessionRow.id)
                   & AllocationRow.released_at.is_(None))
        .where(SessionRow.status.in_(list(HOLDING)), SessionRow.node_id.is_not(None))
    )
    found: dict[str, tuple[str, float | None, int, int, list[tuple[int, int]]]] = {}
    for r in rows:
        entry = found.get(r.id)
        if entry is None:
            entry = found[r.id] = (r.node_id, _ends(r.ends_at, r.time_limit, now), r.cpu, r.mem,
                                   [])
        if r.device_index is not None:
            entry[4].append((r.device_index, r.gpu))
    per_node: dict[str, list[Running]] = defaultdict(list)
    for node_id, ends, cpu, mem, slices in found.values():
        per_node[node_id].append(Running(ends, cpu, mem, tuple(slices)))
    for node in nodes:
        node.running = tuple(per_node.get(node.id, ()))


def _ends(ends_at: datetime | None, limit: int | None, now: datetime) -> float | None:
    if ends_at is not None:
        return ends_at.timestamp()
    return None if limit is None else now.timestamp() + limit

