"""Node identity: join tokens (admins make them), registration, and the node's credential."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import (
    JoinTokenCreate,
    JoinTokenCreated,
    JoinTokenPublic,
    NodeRegister,
    NodeRegistered,
    NodeStatus,
)
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import JoinToken, NodeRow, User
from gpuslice.manager.errors import NotFound, Unauthorized
from gpuslice.manager.security import (
    JOIN_TOKEN_PREFIX,
    NODE_TOKEN_PREFIX,
    new_token,
    token_digest,
)
from gpuslice.manager.settings import NodeSettings

log = logging.getLogger(__name__)


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
    capacity = body.device_capacity or nodes.device_capacity
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
    log.info("node %s registered", node.name, extra={"node_id": node.id})
    return NodeRegistered(
        node_id=node.id, credential=credential,
        heartbeat_interval_ms=round(nodes.heartbeat_interval * 1000),
    )


async def authenticate_node(db: AsyncSession, credential: str) -> NodeRow:
    node = await db.scalar(
        select(NodeRow).where(NodeRow.credential_hash == token_digest(credential))
    )
    if node is None:
        raise Unauthorized("unknown node credential; register again with a join token")
    await db.commit()
    return node


def _join_public(row: JoinToken) -> JoinTokenPublic:
    return JoinTokenPublic(
        id=row.id, name=row.name, created_at=row.created_at, expires_at=row.expires_at
    )
