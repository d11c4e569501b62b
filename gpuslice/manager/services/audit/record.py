"""Writing rows: inside the transaction that makes the change, or alone for a refusal.

A request's row joins the first commit of the request that writes anything once its actor is
known (``before_commit`` below), so the change and its row commit together or not at all. A
request that wrote nothing that way (a refusal, a failure, a change made without the ORM
session) gets its row from the middleware, in its own short transaction, before the answer
leaves. Platform decisions call :func:`record` in the transaction of the decision.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.services.audit.context import AuditContext, current

_DETAILS_MAX = 4096
_WROTE, _CARRIES = "audit_wrote", "audit_carries"


def record(db: AsyncSession, action: str, *, actor: str, target_type: str | None = None,
           target_id: str | None = None, outcome: str = "success", reason: str | None = None,
           details: dict[str, Any] | None = None) -> AuditRow:
    """Add a row for a platform decision (``actor``: ``system:scheduler``…) to ``db``'s
    transaction: it commits with the decision."""
    row = AuditRow(
        id=uuid.uuid4().hex, at=utcnow(), actor_type="system", actor_id=actor,
        actor_name=actor, via="system", action=action, outcome=outcome, reason=reason,
        target_type=target_type, target_id=target_id, details=_details(details or {}))
    db.add(row)
    return row


def row_of(ctx: AuditContext, outcome: str, reason: str | None = None) -> AuditRow:
    """The row of the request ``ctx`` is about."""
    details = dict(ctx.details)
    if fields := _fields(bytes(ctx.body)):
        details["fields"] = fields
    return AuditRow(
        id=uuid.uuid4().hex, at=utcnow(), actor_type=ctx.actor_type, actor_id=ctx.actor_id,
        actor_name=ctx.actor_name, via=ctx.via, token_id=ctx.token_id,
        action=ctx.action or "request", outcome=outcome, reason=reason,
        target_type=ctx.target_type, target_id=_cut(ctx.target_id, 128),
        source_ip=ctx.source_ip, user_agent=_cut(ctx.user_agent, 256),
        request_id=ctx.request_id, details=_details(details))


async def write_alone(sessionmaker: async_sessionmaker[AsyncSession], ctx: AuditContext,
                      outcome: str, reason: str | None) -> None:
    """The request's row in a transaction of its own (a refusal, or a change that wrote
    nothing through the ORM session)."""
    ctx.recorded = True  # the hook below leaves this transaction alone
    async with sessionmaker() as db:
        db.add(row_of(ctx, outcome, reason))
        await db.commit()


def install() -> None:
    """Hook the ORM's sessions (once per process; every session of every engine)."""
    if event.contains(Session, "before_commit", _before_commit):
        return
    event.listen(Session, "after_flush", _after_flush)
    event.listen(Session, "do_orm_execute", _on_execute)
    event.listen(Session, "before_commit", _before_commit)
    event.listen(Session, "after_commit", _after_commit)
    event.listen(Session, "after_rollback", _after_rollback)


def _after_flush(session: Session, _flush: UOWTransaction) -> None:
    session.info[_WROTE] = True


def _on_execute(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        state.session.info[_WROTE] = True


def _before_commit(session: Session) -> None:
    ctx = current()
    if ctx is None or not ctx.armed or ctx.recorded:
        return
    if not (session.info.get(_WROTE) or session.new or session.dirty or session.deleted):
        return
    session.add(row_of(ctx, "success"))
    ctx.recorded = True
    session.info[_CARRIES] = ctx


def _after_commit(session: Session) -> None:
    session.info.pop(_WROTE, None)
    session.info.pop(_CARRIES, None)


def _after_rollback(session: Session) -> None:
    session.info.pop(_WROTE, None)
    ctx = session.info.pop(_CARRIES, None)
    if ctx is not None:  # the row went with the change: the answer will say what happened
        ctx.recorded = False


def _fields(body: bytes) -> list[str]:
    """The names of a JSON body's top-level fields (what a change touched; never values)."""
    try:
        value: Any = json.loads(body) if body else None
    except ValueError:
        return []
    return sorted(str(k)[:64] for k in value)[:50] if isinstance(value, dict) else []


def _details(details: dict[str, Any]) -> str | None:
    if not details:
        return None
    text = json.dumps(details, sort_keys=True, separators=(",", ":"), default=str)
    if len(text) > _DETAILS_MAX:
        text = json.dumps({"truncated": True, "keys": sorted(details)[:50]},
                          separators=(",", ":"))
    return text


def _cut(value: str | None, size: int) -> str | None:
    return None if value is None else _CONTROL.sub("\ufffd", value)[:size]


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
