"""Node identity: join tokens (admins make them), registration, the node's credential, and its
revocation.

- **A join token registers one node, once**, within its lifetime (1 hour by default), and
  optionally only a node of the name it is bound to. Using it is one conditional UPDATE
  (``… WHERE used_at IS NULL``): two agents racing with one token cannot both win.
- **An existing node's name cannot be taken** with a join token: registering it again needs
  that node's current credential (the agent rotating it) or an admin's **re-key** token, one
  bound to that name with ``rekey``: a holder of an ordinary token never gets another node's
  credential, sessions, environment or commands.
- **Revoking a node** refuses its credential from then on (``node_revoked``) and ends its
  sessions (capacity released); only a re-key token brings it back.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import NodeRegister, NodeRegistered, NodeStatus
from gpuslice.common.schemas.nodes import (
    JoinTokenCreate,
    JoinTokenCreated,
    JoinTokenPublic,
    NodePublic,
)
from gpuslice.common.schemas.projects import DEFAULT_GROUP
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import JoinTokenRow, NodeRow, SessionRow, UserRow
from gpuslice.manager.errors import Conflict, NotFound, StaleStatus, Unauthorized
from gpuslice.manager.security import (
    JOIN_TOKEN_PREFIX,
    NODE_TOKEN_PREFIX,
    new_token,
    token_digest,
)
from gpuslice.manager.services.lifecycle import transition
from gpuslice.manager.services.nodes.instances import LIVE_HEARTBEATS, check_agent
from gpuslice.manager.services.nodes.views import public_node
from gpuslice.manager.settings import NodeSettings

log = logging.getLogger(__name__)
REVOKED = "node revoked by an admin"


async def create_join_token(
    db: AsyncSession, admin: UserRow, body: JoinTokenCreate
) -> JoinTokenCreated:
    token = new_token(JOIN_TOKEN_PREFIX)
    row = JoinTokenRow(
        name=body.name, token_hash=token_digest(token), created_by=admin.id,
        expires_at=utcnow() + timedelta(hours=body.expires_in_hours), node_name=body.node,
        rekey=body.rekey,
    )
    db.add(row)
    await db.commit()
    return JoinTokenCreated(**_join_public(row).model_dump(), token=token)


async def list_join_tokens(db: AsyncSession) -> list[JoinTokenPublic]:
    """Tokens not revoked, newest last: unused, used and expired ones with their status."""
    rows = await db.scalars(
        select(JoinTokenRow).where(JoinTokenRow.revoked_at.is_(None)).order_by(JoinTokenRow.created_at)
    )
    return [_join_public(r) for r in rows]


async def revoke_join_token(db: AsyncSession, token_id: str) -> None:
    """Revoke a token that could still admit a node. A used or expired one admits nobody:
    revoking it would claim to shut out what it no longer can (a node that joined with it is
    shut out by revoking the node)."""
    row = await db.get(JoinTokenRow, token_id)
    if row is None or row.revoked_at is not None:
        raise NotFound(f"no active join token {token_id}")
    state = _join_public(row)
    if state.status == "used":
        raise Conflict(
            f"join token {row.name} was used already; it admits no other node, so there is "
            "nothing to revoke (to shut out the node that joined with it, revoke that node)",
            code="token_used",
        )
    if state.status == "expired":
        raise Conflict(f"join token {row.name} has expired; it admits no node any more",
                       code="token_expired")
    result = await db.execute(
        update(JoinTokenRow)  # guarded: a node registering meanwhile keeps its token "used"
        .where(JoinTokenRow.id == token_id, JoinTokenRow.revoked_at.is_(None),
               JoinTokenRow.used_at.is_(None))
        .values(revoked_at=utcnow())
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise Conflict(f"join token {row.name} was used just now", code="token_used")
    await db.commit()


async def register(
    db: AsyncSession, body: NodeRegister, nodes: NodeSettings, credential: str | None = None
) -> NodeRegistered:
    """The node's new credential: for a new node with a join token; for an existing one with
    its current ``credential`` (rotation) or an admin's re-key token for its name."""
    node = await db.scalar(select(NodeRow).where(NodeRow.name == body.name))
    if node is not None:  # rotation and re-key alike: not while another agent runs it
        check_agent(node, body.agent_id, nodes.heartbeat_interval * LIVE_HEARTBEATS)
    if node is not None and credential and _holds(node, credential):
        return await _issue(db, node, body, nodes)
    if body.join_token is None:
        raise Unauthorized(
            "register with a join token (an existing node may rotate its credential by sending "
            "it as the bearer token)", code="bad_join_token",
        )
    join = await _usable_join_token(db, body)
    if node is not None and not join.rekey:
        raise Conflict(
            f"a node named {body.name!r} is already registered; registering it again needs its "
            f"current credential, or a re-key token from an admin (`gpuslice node rekey "
            f"{body.name}`)", field="name", code="node_exists",
        )
    if node is None:
        node = NodeRow(
            name=body.name, pool=body.pool or DEFAULT_GROUP, status=NodeStatus.ALIVE,
            images=[], usage={},
            device_capacity=body.device_capacity or nodes.device_capacity,
            credential_hash=token_digest(new_token(NODE_TOKEN_PREFIX)),
            last_heartbeat_at=utcnow(),
        )
        db.add(node)
        try:
            await db.flush()
        except IntegrityError:  # another agent registered this name at the same instant
            await db.rollback()
            raise Conflict(f"a node named {body.name!r} is already registered", field="name",
                           code="node_exists") from None
    await _use(db, join, node.id)
    return await _issue(db, node, body, nodes)


async def authenticate_node(db: AsyncSession, credential: str) -> NodeRow:
    node = await db.scalar(
        select(NodeRow).where(NodeRow.credential_hash == token_digest(credential))
    )
    await db.commit()
    if node is None:
        raise _unknown()
    _admit(node.name, node.revoked_at)
    return node


async def authenticate_node_id(db: AsyncSession, credential: str) -> str:
    """``authenticate_node`` for a caller that needs only the node's id (the long-poll, every
    agent's most frequent call with the heartbeat): three columns read, no row mapped."""
    found = (await db.execute(
        select(NodeRow.id, NodeRow.name, NodeRow.revoked_at)
        .where(NodeRow.credential_hash == token_digest(credential))
    )).first()
    await db.commit()
    if found is None:
        raise _unknown()
    node_id, name, revoked_at = found
    _admit(name, revoked_at)
    return str(node_id)


def _unknown() -> Unauthorized:
    return Unauthorized("unknown node credential; register again with a join token")


def _admit(name: str, revoked_at: datetime | None) -> None:
    if revoked_at is not None:
        raise Unauthorized(
            f"node {name} was revoked by an admin; it joins again only with a re-key "
            f"token (`gpuslice node rekey {name}`)", code="node_revoked",
        )


async def is_node_credential(db: AsyncSession, credential: str) -> bool:
    found = await db.scalar(
        select(NodeRow.id).where(
            NodeRow.credential_hash == token_digest(credential), NodeRow.revoked_at.is_(None)
        )
    )
    await db.commit()
    return found is not None


async def revoke_node(
    sessionmaker: async_sessionmaker[AsyncSession], node_id: str
) -> NodePublic:
    """Refuse the node's credential from now on and end the sessions it holds (their capacity
    is released; requests to it fail like to a lost node)."""
    async with sessionmaker() as db:
        result = await db.execute(
            update(NodeRow)
            .where(NodeRow.id == node_id)
            .values(revoked_at=utcnow(), status=NodeStatus.REVOKED)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise NotFound(f"no node {node_id}", field="node_id")
        await db.commit()
        held = (await db.scalars(
            select(SessionRow).where(SessionRow.node_id == node_id,
                                     SessionRow.status.in_(list(HOLDING)))
        )).all()
        for row in held:
            try:
                await transition(db, row, SessionStatus.ERROR, REVOKED)
                await db.commit()
            except StaleStatus:  # it ended meanwhile
                await db.rollback()
        node = await public_node(db, node_id)
    log.warning("node %s revoked; %d session(s) ended", node.name, len(held))
    return node


# ------------------------------------------------------------------ helpers


def _holds(node: NodeRow, credential: str) -> bool:
    return node.revoked_at is None and node.credential_hash == token_digest(credential)


async def _usable_join_token(db: AsyncSession, body: NodeRegister) -> JoinTokenRow:
    assert body.join_token is not None
    join = await db.scalar(
        select(JoinTokenRow).where(
            JoinTokenRow.token_hash == token_digest(body.join_token),
            JoinTokenRow.revoked_at.is_(None),
            JoinTokenRow.used_at.is_(None),
        )
    )
    if join is None or (join.expires_at is not None and join.expires_at <= utcnow()):
        raise Unauthorized(
            "unknown, used, revoked or expired join token (each registers one node, once)",
            code="bad_join_token",
        )
    if join.node_name is not None and join.node_name != body.name:
        raise Unauthorized(f"this join token is for node {join.node_name!r}, not {body.name!r}",
                           code="bad_join_token")
    return join


async def _use(db: AsyncSession, join: JoinTokenRow, node_id: str) -> None:
    result = await db.execute(
        update(JoinTokenRow)
        .where(JoinTokenRow.id == join.id, JoinTokenRow.used_at.is_(None))
        .values(used_at=utcnow(), used_by=node_id)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        await db.rollback()
        raise Unauthorized("this join token was used by another node just now",
                           code="bad_join_token")


async def _issue(
    db: AsyncSession, node: NodeRow, body: NodeRegister, nodes: NodeSettings
) -> NodeRegistered:
    """A new credential for ``node`` (the old one stops working), in the caller's transaction."""
    credential = new_token(NODE_TOKEN_PREFIX)
    node.credential_hash = token_digest(credential)
    if body.pool is not None:
        node.pool = body.pool
    node.report_digest = None  # its first heartbeat is applied in full
    node.agent_id = body.agent_id
    if node.revoked_at is not None:  # re-keyed after a revocation: it may join again
        node.revoked_at, node.status, node.last_heartbeat_at = None, NodeStatus.ALIVE, utcnow()
    await db.commit()
    log.info("node %s registered", node.name, extra={"node_id": node.id})
    return NodeRegistered(
        node_id=node.id, credential=credential,
        heartbeat_interval_ms=round(nodes.heartbeat_interval * 1000),
    )


def _join_public(row: JoinTokenRow) -> JoinTokenPublic:
    if row.revoked_at is not None:
        status = "revoked"
    elif row.used_at is not None:
        status = "used"
    elif row.expires_at is not None and row.expires_at <= utcnow():
        status = "expired"
    else:
        status = "active"
    return JoinTokenPublic(
        id=row.id, name=row.name, node=row.node_name, rekey=row.rekey,
        created_at=row.created_at, expires_at=row.expires_at, used_at=row.used_at,
        status=status,
    )
