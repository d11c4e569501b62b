"""Node agents: join tokens, registration, heartbeats and session state reports."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import case, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import parse_fgpu_per_gpu
from gpuslice.common.schemas.agents import (
    Heartbeat,
    HeartbeatAck,
    JoinTokenCreate,
    JoinTokenCreated,
    JoinTokenPublic,
    NodeRegister,
    NodeRegistered,
    NodeStatus,
    StateReport,
)
from gpuslice.common.schemas.sessions import FINAL, SessionResult, SessionStatus, SessionType
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import DeviceRow, JoinToken, NodeRow, SessionRow, User
from gpuslice.manager.errors import InvalidRequest, NotFound, StaleStatus, Unauthorized
from gpuslice.manager.events import wake_after_commit
from gpuslice.manager.security import (
    JOIN_TOKEN_PREFIX,
    NODE_TOKEN_PREFIX,
    new_token,
    token_digest,
)
from gpuslice.manager.services import image_reports
from gpuslice.manager.services.lifecycle import transition
from gpuslice.manager.settings import NodeSettings

log = logging.getLogger(__name__)
S = SessionStatus
_REPORTABLE = (S.PREPARING, S.RUNNING, S.TERMINATED, S.ERROR)
_FINAL_REPORTS = (S.TERMINATED, S.ERROR)


async def create_join_token(
    db: AsyncSession, admin: User, body: JoinTokenCreate
) -> JoinTokenCreated:
    token = new_token(JOIN_TOKEN_PREFIX)
    expires = utcnow() + timedelta(hours=body.expires_in_hours) if body.expires_in_hours else None
    row = JoinToken(
        name=body.name, token_hash=token_digest(token), created_by=admin.id, expires_at=expires
    )
    db.add(row)
    await db.commit()
    return JoinTokenCreated(**_join_public(row).model_dump(), token=token)


async def list_join_tokens(db: AsyncSession) -> list[JoinTokenPublic]:
    rows = await db.scalars(
        select(JoinToken).where(JoinToken.revoked_at.is_(None)).order_by(JoinToken.created_at)
    )
    return [_join_public(r) for r in rows]


async def revoke_join_token(db: AsyncSession, token_id: str) -> None:
    result = await db.execute(
        update(JoinToken)
        .where(JoinToken.id == token_id, JoinToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no active join token {token_id}")
    await db.commit()


async def register(db: AsyncSession, body: NodeRegister, nodes: NodeSettings) -> NodeRegistered:
    """Exchange a join token for the node's own credential (re-registering rotates it)."""
    join = await db.scalar(
        select(JoinToken).where(
            JoinToken.token_hash == token_digest(body.join_token), JoinToken.revoked_at.is_(None)
        )
    )
    if join is None or (join.expires_at is not None and join.expires_at <= utcnow()):
        raise Unauthorized("unknown, revoked or expired join token", code="bad_join_token")
    capacity = (
        parse_fgpu_per_gpu(body.fgpu_per_gpu, field="fgpu_per_gpu")
        if body.fgpu_per_gpu is not None
        else nodes.device_capacity
    )
    credential = new_token(NODE_TOKEN_PREFIX)
    node = await db.scalar(select(NodeRow).where(NodeRow.name == body.name))
    if node is None:
        node = NodeRow(
            name=body.name, pool=body.pool, status=NodeStatus.ALIVE, device_capacity=capacity,
            credential_hash=token_digest(credential), last_heartbeat_at=utcnow(),
            images=[], usage={},
        )
        db.add(node)
    else:  # the agent lost its credential; the admin's join token vouches for it again
        node.credential_hash = token_digest(credential)
        node.pool = body.pool
    await db.commit()
    log.info("node %s registered (%s)", node.name, node.id)
    return NodeRegistered(
        node_id=node.id, credential=credential, heartbeat_interval=nodes.heartbeat_interval
    )


async def authenticate_node(db: AsyncSession, credential: str) -> NodeRow:
    node = await db.scalar(
        select(NodeRow).where(NodeRow.credential_hash == token_digest(credential))
    )
    if node is None:
        raise Unauthorized("unknown node credential; register again with a join token")
    await db.commit()
    return node


async def heartbeat(db: AsyncSession, node: NodeRow, body: Heartbeat) -> HeartbeatAck:
    """Record capacity, devices, images and usage; a LOST node that reports in is ALIVE again."""
    came_back = node.status != NodeStatus.ALIVE
    changed = came_back or (node.cpu, node.mem) != (body.cpu, body.mem)
    await db.execute(
        update(NodeRow)
        .where(NodeRow.id == node.id)
        .values(
            # Never below what is allocated: the check constraint holds, sessions drain first.
            cpu=case((NodeRow.cpu_used > body.cpu, NodeRow.cpu_used), else_=body.cpu),
            mem=case((NodeRow.mem_used > body.mem, NodeRow.mem_used), else_=body.mem),
            images=sorted(set(body.images)), usage=body.usage, status=NodeStatus.ALIVE,
            last_heartbeat_at=utcnow(),
        )
    )
    changed = await _sync_devices(db, node, body) or changed
    await image_reports.sync_node(db, node.id, body)
    if changed:
        wake_after_commit(db, "scheduler")
    await db.commit()
    if came_back:
        log.warning("node %s is back (it reports %d running)", node.name, len(body.running))
    version = await db.scalar(select(NodeRow.assignment_version).where(NodeRow.id == node.id))
    await db.commit()
    return HeartbeatAck(node_id=node.id, status=NodeStatus.ALIVE, assignment_version=version or 0)


async def report_state(
    db: AsyncSession, node: NodeRow, session_id: str, body: StateReport
) -> SessionStatus:
    """Apply what the agent sees; repeated or outdated reports change nothing.

    Returns the session's status afterwards.
    """
    for _attempt in range(3):
        row = await db.scalar(
            select(SessionRow).where(SessionRow.id == session_id, SessionRow.node_id == node.id)
        )
        if row is None:
            raise NotFound(f"session {session_id} is not assigned to this node")
        try:
            await _apply_report(db, row, body)
            await db.commit()
            return SessionStatus(row.status)
        except StaleStatus:
            await db.rollback()
            db.expunge_all()
    raise StaleStatus(f"session {session_id} keeps changing; report again")


async def _apply_report(db: AsyncSession, row: SessionRow, body: StateReport) -> None:
    if body.status not in _REPORTABLE:
        raise InvalidRequest(
            f"agents report PREPARING, RUNNING, TERMINATED or ERROR, not {body.status}",
            field="status",
        )
    current = SessionStatus(row.status)
    if current in FINAL:
        if body.status in _FINAL_REPORTS and body.logs is not None:
            await _keep_late_logs(db, row.id, body.logs)
        return
    if body.status in (S.PREPARING, S.RUNNING):
        # Once stopping, a late "running" must not undo the stop; never go back to PREPARING.
        if current in (S.SCHEDULED, S.PREPARING) and current is not body.status:
            await transition(db, row, body.status, body.reason or _started(body.status))
        elif current is S.PREPARING and body.status is S.PREPARING and body.reason:
            await _progress(db, row.id, body.reason)
        return
    logs = {"final_logs": body.logs} if body.logs is not None else {}
    if body.status is S.TERMINATED:
        result, reason = _ended(row, body)
        await transition(
            db, row, S.TERMINATED, reason, result=result, exit_code=body.exit_code, **logs
        )
    else:
        await transition(db, row, S.ERROR, body.reason or "failed on the node", **logs)


async def _progress(db: AsyncSession, session_id: str, reason: str) -> None:
    # What PREPARING is doing now ("pulling IMAGE: 45%"): the reason, not a status change, so
    # no history row; only while the session is still PREPARING.
    await db.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.status == S.PREPARING)
        .values(status_reason=reason)
        .execution_options(synchronize_session=False)
    )


async def _keep_late_logs(db: AsyncSession, session_id: str, logs: str) -> None:
    # The session ended without the agent (node lost, then back): its report still brings the
    # output the user would otherwise lose. Never overwrite logs already kept.
    await db.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.final_logs.is_(None))
        .values(final_logs=logs)
        .execution_options(synchronize_session=False)
    )


def _started(status: SessionStatus) -> str:
    return "preparing the container" if status is S.PREPARING else "running"


def _ended(row: SessionRow, body: StateReport) -> tuple[str | None, str]:
    if row.status == S.TERMINATING:
        return None, body.reason or "stopped"
    if row.type == SessionType.BATCH and body.exit_code is not None:
        result = SessionResult.SUCCESS if body.exit_code == 0 else SessionResult.FAILED
        return result, body.reason or f"exited with code {body.exit_code}"
    return None, body.reason or f"exited with code {body.exit_code}"


async def _sync_devices(db: AsyncSession, node: NodeRow, body: Heartbeat) -> bool:
    current = {
        d.index: d
        for d in (
            await db.scalars(select(DeviceRow).where(DeviceRow.node_id == node.id))
        ).all()
    }
    changed = False
    for dev in body.devices:
        row = current.pop(dev.index, None)
        if row is None:
            db.add(
                DeviceRow(
                    node_id=node.id, index=dev.index, uuid=dev.uuid, model=dev.model, mem=dev.mem,
                    sms=dev.sms, capacity=node.device_capacity, used=0,
                )
            )
            changed = True
        elif (row.uuid, row.model, row.mem, row.sms) != (dev.uuid, dev.model, dev.mem, dev.sms):
            row.uuid, row.model, row.mem, row.sms = dev.uuid, dev.model, dev.mem, dev.sms
            changed = True
    if current:  # devices gone from the node: drop those nothing is allocated on
        gone = [d.id for d in current.values()]
        await db.execute(delete(DeviceRow).where(DeviceRow.id.in_(gone), DeviceRow.used == 0))
        changed = True
    await db.flush()
    return changed


def _join_public(row: JoinToken) -> JoinTokenPublic:
    return JoinTokenPublic(
        id=row.id, name=row.name, created_at=row.created_at, expires_at=row.expires_at
    )


