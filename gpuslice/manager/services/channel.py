"""The one channel from the manager to a node's agent: ask, deliver once, answer, expire.

Agents dial the manager (nodes may sit behind NAT), so the manager never calls them. To ask an
agent for something (a log tail, a command, a commit), a service calls :meth:`Channel.ask`: it
stores an ``agent_requests`` row addressed to the node and bumps the node's assignment version
(its waiting long-poll answers at once), :func:`deliver` hands the request to the agent in one
assignments answer, the agent answers with ``PUT /agents/me/requests/{id}`` (:func:`answer`),
and the waiting ask picks the answer up and deletes the row. Rules (the manager README, "The
request channel", has them with their reasons):

- **Delivered at most once**: :func:`deliver` marks what it hands out in the same conditional
  UPDATE that selects it, so a request is in one assignments answer only; a lost answer is a
  timeout, never a command run twice.
- **Only the addressed node answers, once, while awaited**: :func:`answer` is one conditional
  UPDATE on (id, node, kind, unanswered, unexpired); anything else is a 404 (422 for another
  kind).
- **Expiry** (``expires_at``) is when the waiter stops waiting: never delivered after it, not
  answerable after it, purged ``grace`` after it by :func:`purge` (the waiter died with its
  manager). Each ask chooses its own wait.
- **No transaction across the wait**: every look opens a short session; answers wake waiters
  in this process at once and other replicas' waiters at their next poll of the database.

Streams (terminals, apps) use the same rows: :meth:`Channel.post` stores a ``stream`` request
without waiting for an answer, and the agent, instead of answering, dials back; :func:`claim`
is the dial-back's check (the same conditional UPDATE as an answer: only the addressed node,
once, before expiry). Pairing the dialled link with its waiter is ``services/apps/links.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import (
    AgentRequest,
    Answer,
    AppsAnswer,
    Ask,
    CommitAnswer,
    ExecAnswer,
    LogsAnswer,
    NodeStatus,
)
from gpuslice.common.waits import wait_event
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import AgentRequestRow, NodeRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.events import Hub, wake_after_commit

A = TypeVar("A", LogsAnswer, ExecAnswer, CommitAnswer, AppsAnswer)


@dataclass(frozen=True, slots=True)
class Channel:
    """What an ask needs: sessions to look with, the hub to be woken by, and how often to look
    at the database besides (an answer taken by another manager replica)."""

    sessionmaker: async_sessionmaker[AsyncSession]
    hub: Hub
    poll: float

    async def ask(
        self,
        node_id: str,
        question: Ask,
        expect: type[A],
        *,
        timeout: float,
        session_id: str | None = None,
        about: str = "this node",
    ) -> A | None:
        """Ask ``node_id``'s agent ``question`` and wait up to ``timeout`` seconds for its answer
        of type ``expect``; ``None`` when none came in time (the request is gone either way).

        A LOST node cannot be reached: ``Conflict`` ``node_lost`` (``about`` names what the
        caller wanted to reach, e.g. ``session train-1``).
        """
        async with self.sessionmaker() as db:
            request_id = await _store(db, node_id, session_id, question, timeout, about)
        return await self._await(request_id, expect, timeout)

    async def post(
        self,
        node_id: str,
        question: Ask,
        *,
        timeout: float,
        session_id: str | None = None,
        about: str = "this node",
        request_id: str | None = None,
    ) -> str:
        """Store a request the agent acts on without answering (a stream: it dials back) and
        return its id (``request_id`` when given); it expires after ``timeout`` seconds.
        ``Conflict`` ``node_lost`` as for :meth:`ask`."""
        async with self.sessionmaker() as db:
            return await _store(db, node_id, session_id, question, timeout, about, request_id)

    async def forget(self, request_id: str) -> None:
        """Delete a request its waiter no longer needs (a stream paired, or given up on)."""
        async with self.sessionmaker() as db:
            await db.execute(delete(AgentRequestRow).where(AgentRequestRow.id == request_id))
            await db.commit()

    async def _await(self, request_id: str, expect: type[A], timeout: float) -> A | None:
        deadline = time.monotonic() + timeout
        while True:
            woken = self.hub.answers.listen()  # before the look: a wake-up is never missed
            async with self.sessionmaker() as db:
                row = await db.get(AgentRequestRow, request_id)
                got = row.answer if row is not None and row.answered_at is not None else None
                remaining = deadline - time.monotonic()
                if got is not None or remaining <= 0 or row is None:
                    await db.execute(
                        delete(AgentRequestRow).where(AgentRequestRow.id == request_id)
                    )
                    await db.commit()
                    return None if got is None else expect.model_validate(got)
            await wait_event(woken, min(self.poll, remaining))


# Built once: every answer to a node's long-poll runs it (see nodes/assignments.py).
_DELIVER = (
    update(AgentRequestRow)
    .where(
        AgentRequestRow.node_id == bindparam("node"),
        AgentRequestRow.delivered_at.is_(None),
        AgentRequestRow.expires_at > bindparam("now"),
    )
    .values(delivered_at=bindparam("now", type_=AgentRequestRow.__table__.c.delivered_at.type))
    .returning(
        AgentRequestRow.id, AgentRequestRow.session_id, AgentRequestRow.payload,
        AgentRequestRow.created_at,
    )
    .execution_options(synchronize_session=False)
)


async def deliver(db: AsyncSession, node_id: str) -> list[AgentRequest]:
    """The node's requests not delivered yet and still awaited, oldest first, now marked
    delivered (in the caller's transaction: they are handed out when it commits)."""
    rows = (await db.execute(_DELIVER, {"node": node_id, "now": utcnow()})).all()
    rows = sorted(rows, key=lambda r: (r.created_at, r.id))
    return [AgentRequest(id=r.id, session_id=r.session_id, ask=r.payload) for r in rows]


async def answer(db: AsyncSession, node_id: str, request_id: str, body: Answer) -> None:
    """Record the agent's answer to a request addressed to ``node_id`` and wake its waiter.

    Another node's request, an answered one or one nobody awaits any more: ``NotFound``; an
    answer of another kind than the request's: ``InvalidRequest``.
    """
    result = await db.execute(
        update(AgentRequestRow)
        .where(
            AgentRequestRow.id == request_id,
            AgentRequestRow.node_id == node_id,
            AgentRequestRow.kind == body.kind,
            AgentRequestRow.answered_at.is_(None),
            AgentRequestRow.expires_at > utcnow(),
        )
        .values(answered_at=utcnow(), answer=body.model_dump(mode="json"))
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        kind = await db.scalar(
            select(AgentRequestRow.kind).where(
                AgentRequestRow.id == request_id, AgentRequestRow.node_id == node_id
            )
        )
        await db.rollback()
        if kind is not None and kind != body.kind:
            raise InvalidRequest(
                f"request {request_id} is a {kind} request; answer it with kind {kind!r}",
                field="kind",
            )
        raise NotFound(f"no open request {request_id} for this node")
    wake_after_commit(db, "answer")
    await db.commit()


async def claim(db: AsyncSession, node_id: str, request_id: str, kind: str) -> str | None:
    """Take a request of ``kind`` addressed to ``node_id`` that was delivered and is neither
    taken nor expired: the session it concerns (``""`` for none), or ``None`` when there is no
    such request (another node's looks the same). Commits."""
    result = await db.execute(
        update(AgentRequestRow)
        .where(
            AgentRequestRow.id == request_id,
            AgentRequestRow.node_id == node_id,
            AgentRequestRow.kind == kind,
            AgentRequestRow.delivered_at.is_not(None),
            AgentRequestRow.answered_at.is_(None),
            AgentRequestRow.expires_at > utcnow(),
        )
        .values(answered_at=utcnow())
        .returning(AgentRequestRow.session_id)
        .execution_options(synchronize_session=False)
    )
    row = result.first()
    await db.commit()
    return None if row is None else (row.session_id or "")


async def purge(db: AsyncSession, grace: timedelta) -> None:
    """Delete requests expired more than ``grace`` ago: their waiter has gone."""
    await db.execute(delete(AgentRequestRow).where(AgentRequestRow.expires_at < utcnow() - grace))
    await db.commit()


async def _store(
    db: AsyncSession,
    node_id: str,
    session_id: str | None,
    question: Ask,
    timeout: float,
    about: str,
    request_id: str | None = None,
) -> str:
    status = await db.scalar(select(NodeRow.status).where(NodeRow.id == node_id))
    if status != NodeStatus.ALIVE:
        raise Conflict(f"the node of {about} is lost; it cannot be reached", code="node_lost")
    row = AgentRequestRow(
        id=request_id or new_id(), kind=question.kind, node_id=node_id, session_id=session_id,
        payload=question.model_dump(mode="json"),
        expires_at=utcnow() + timedelta(seconds=timeout),
    )
    db.add(row)
    await db.execute(
        update(NodeRow)
        .where(NodeRow.id == node_id)
        .values(assignment_version=NodeRow.assignment_version + 1)
    )
    wake_after_commit(db, "node", node_id)
    await db.commit()
    return row.id
