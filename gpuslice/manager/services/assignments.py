"""What each node must run, delivered by long-poll as soon as it changes.

Every change to a node's desired state bumps ``nodes.assignment_version`` in the same transaction
(see ``lifecycle.transition``). An agent asks with the version it has; the answer comes at once if
the version moved, else when this process's hub signals the node, else after a short database
poll (another manager replica made the change), else at the wait limit.
"""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.agents import Assignment, Assignments, LogRequest, SliceAssignment
from gpuslice.common.schemas.common import ResourcesPublic
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus, SessionType
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import LogRequestRow, NodeRow, SessionRow, User
from gpuslice.manager.events import Hub, wait_for
from gpuslice.manager.services import session_commit
from gpuslice.manager.services.image_reports import pulls_for, removals_for
from gpuslice.manager.services.session_exec import pending_for
from gpuslice.manager.services.session_views import fraction_of

LOG_REQUEST_TTL = timedelta(minutes=5)


async def long_poll(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    node_id: str,
    since: int | None,
    wait: float,
    poll: float,
) -> Assignments:
    deadline = time.monotonic() + wait
    while True:
        changed = hub.node(node_id).listen()
        async with sessionmaker() as db:
            version = await db.scalar(
                select(NodeRow.assignment_version).where(NodeRow.id == node_id)
            )
            remaining = deadline - time.monotonic()
            if since is None or version != since or remaining <= 0 or hub.closing.is_set():
                return await _build(db, node_id, version or 0)
        await wait_for(changed, min(poll, remaining))


async def _build(db: AsyncSession, node_id: str, version: int) -> Assignments:
    rescan = await db.scalar(select(NodeRow.rescan).where(NodeRow.id == node_id))
    rows = (
        await db.execute(
            select(SessionRow, User.username)
            .join(User, User.id == SessionRow.owner_id)
            .where(SessionRow.node_id == node_id, SessionRow.status.in_(list(HOLDING)))
            .options(selectinload(SessionRow.allocations))
            .order_by(SessionRow.created_at, SessionRow.id)
        )
    ).all()
    logs = await db.scalars(
        select(LogRequestRow).where(
            LogRequestRow.node_id == node_id,
            LogRequestRow.completed_at.is_(None),
            LogRequestRow.created_at > utcnow() - LOG_REQUEST_TTL,
        )
    )
    pulls = await pulls_for(db, node_id, {row.image for row, _owner in rows})
    answer = Assignments(
        node_id=node_id, version=version,
        sessions=[_assignment(row, owner, row.image in pulls) for row, owner in rows],
        log_requests=[LogRequest(id=r.id, session_id=r.session_id, tail=r.tail) for r in logs],
        exec_requests=await pending_for(db, node_id),
        commit_requests=await session_commit.pending_for(db, node_id),
        remove_images=await removals_for(db, node_id),
        rescan=rescan or 0,
    )
    await db.commit()
    return answer


def _assignment(row: SessionRow, owner: str, pull: bool) -> Assignment:
    status = SessionStatus(row.status)
    return Assignment(
        session_id=row.id, name=row.name, owner=owner, image=row.image,
        type=SessionType(row.type), command=row.command, env=row.env, status=status,
        desired="stopped" if status is SessionStatus.TERMINATING else "running",
        resources=ResourcesPublic.of(row.gpu, row.cpu, row.mem),
        slices=[
            SliceAssignment(
                device_index=a.device_index, device_uuid=a.device_uuid, gpu=fgpu_decimal(a.gpu),
                fraction=fraction_of(a.gpu, a.device_capacity), mem=a.mem, sms=a.sms,
                capacity=fgpu_decimal(a.device_capacity),
            )
            for a in row.allocations
            if a.released_at is None
        ],
        pull=pull,
    )
