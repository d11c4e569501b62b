"""Requests to a node's agent (log tails, commands, commits): rows that ride on its assignments.

The agent dials the manager (nodes may sit behind NAT), so the manager cannot call it. A request
is a row addressed to one node: storing it bumps the node's assignment version (its waiting
long-poll returns at once), the agent answers with a ``PUT`` that fills the row, and the waiting
user request picks the answer up and deletes the row. No transaction is held across the wait:
each look opens a short session.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    CommitRequestRow,
    ExecRequestRow,
    LogRequestRow,
    NodeRow,
    SessionRow,
)
from gpuslice.manager.errors import Conflict, NotFound
from gpuslice.manager.events import Signal, wait_for, wake_after_commit

R = TypeVar("R", LogRequestRow, ExecRequestRow, CommitRequestRow)


async def send(db: AsyncSession, session: SessionRow, request: R) -> str:
    """Store ``request`` for the session's node and wake the node's long-poll; commits.

    Returns the request id. A LOST node cannot be reached: ``Conflict`` (code ``node_lost``).
    """
    node_status = await db.scalar(select(NodeRow.status).where(NodeRow.id == request.node_id))
    if node_status != NodeStatus.ALIVE:
        raise Conflict(
            f"the node of session {session.name} is lost; it cannot be reached", code="node_lost"
        )
    db.add(request)
    await db.execute(
        update(NodeRow)
        .where(NodeRow.id == request.node_id)
        .values(assignment_version=NodeRow.assignment_version + 1)
    )
    wake_after_commit(db, "node", request.node_id)
    await db.commit()
    return request.id


async def await_answer(
    sessionmaker: async_sessionmaker[AsyncSession],
    answered: Signal,
    model: type[R],
    request_id: str,
    timeout: float,
    poll: float,
) -> R | None:
    """The answered request (now deleted), or ``None`` after ``timeout`` seconds (deleted too).

    ``answered`` is the hub signal that ``answer()`` wakes; the database is polled every
    ``poll`` seconds besides, so an answer taken by another manager replica is seen as well.
    """
    deadline = time.monotonic() + timeout
    while True:
        woken = answered.listen()
        async with sessionmaker() as db:
            done = await db.get(model, request_id)
            remaining = deadline - time.monotonic()
            if done is not None and done.completed_at is not None:
                await db.delete(done)
                await db.commit()
                return done
            if remaining <= 0:
                await db.execute(delete(model).where(model.id == request_id))
                await db.commit()
                return None
        await wait_for(woken, min(poll, remaining))


async def answer(
    db: AsyncSession, model: type[R], node_id: str, request_id: str, kind: str, **values: Any
) -> None:
    """Fill an open request addressed to ``node_id`` and wake its waiter (hub ``kind``).

    Any other node, an answered request or one nobody waits for any more: ``NotFound``.
    """
    result = await db.execute(
        update(model)
        .where(model.id == request_id, model.node_id == node_id, model.completed_at.is_(None))
        .values(completed_at=utcnow(), **values)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no open request {request_id} for this node")
    wake_after_commit(db, kind)
    await db.commit()


async def open_for(db: AsyncSession, model: type[R], node_id: str) -> list[R]:
    """Requests addressed to ``node_id`` that are unanswered and still awaited, oldest first.

    For the kinds with an expiry (exec, commit); log requests have none.
    """
    rows = await db.scalars(
        select(model)
        .where(model.node_id == node_id, model.completed_at.is_(None),
               model.expires_at > utcnow())
        .order_by(model.created_at, model.id)
    )
    return list(rows)


async def purge_expired(db: AsyncSession, model: type[R], grace: timedelta) -> None:
    """Drop requests expired more than ``grace`` ago (their waiter is gone)."""
    await db.execute(delete(model).where(model.expires_at < utcnow() - grace))
    await db.commit()
