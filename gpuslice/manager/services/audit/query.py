"""Reading the log: an admin's filtered listing, a user's own security log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.audit import AuditEvent, AuditPage
from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.audit.retention import export_line

OUTCOMES = ("success", "failure", "denied")
_EXPORT_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Filters:
    user: str | None = None  # a username or user id: what they did
    action: str | None = None  # exact, or a prefix ending in `*` ("auth.*")
    target: str | None = None  # "type:id" or an id
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def listing(db: AsyncSession, filters: Filters, limit: int,
                  after: str | None = None) -> AuditPage:
    """The rows matching ``filters``, newest first, a keyset page of ``limit``."""
    query = await _filtered(db, select(AuditRow), filters)
    return await _page(db, query, limit, after)


async def activity(db: AsyncSession, user: UserRow, limit: int, since: datetime | None = None,
                   after: str | None = None) -> AuditPage:
    """``user``'s own security log: their logins and tokens, failed logins on their name,
    and what admins did to their account; never rows about anything else."""
    # Their own refused calls are left out: those name objects they tried, not their account.
    own = and_(AuditRow.actor_id == user.id, AuditRow.action.like("auth.%"),
               or_(AuditRow.outcome == "success",
                   AuditRow.action.in_(("auth.login", "auth.token_rejected"))))
    failed = and_(AuditRow.actor_id.is_(None), AuditRow.actor_name == user.username,
                  AuditRow.action == "auth.login")
    about = and_(AuditRow.target_type == "user", AuditRow.target_id == user.id)
    query = select(AuditRow).where(or_(own, failed, about))
    if since is not None:
        query = query.where(AuditRow.at >= since)
    return await _page(db, query, limit, after)


async def export(sessionmaker: async_sessionmaker[AsyncSession],
                 since: datetime | None) -> AsyncIterator[str]:
    """Every row (from ``since``), oldest first in chain order (unsealed ones last), one JSON
    line each, read in batches by keyset (no transaction held while the answer is sent)."""
    after = -1
    while True:
        async with sessionmaker() as db:
            query = select(AuditRow).where(AuditRow.seq > after).order_by(AuditRow.seq)
            if since is not None:
                query = query.where(AuditRow.at >= since)
            rows = (await db.scalars(query.limit(_EXPORT_BATCH))).all()
        if not rows:
            return
        yield "".join(export_line(row) + "\n" for row in rows)
        after = rows[-1].seq


def public(row: AuditRow) -> AuditEvent:
    return AuditEvent(
        id=row.id, at=row.at, actor_type=row.actor_type, actor_id=row.actor_id,
        actor_name=row.actor_name, via=row.via, action=row.action, outcome=row.outcome,
        reason=row.reason, target_type=row.target_type, target_id=row.target_id,
        source_ip=row.source_ip, user_agent=row.user_agent, request_id=row.request_id,
        details=json.loads(row.details) if row.details else None, seal_pos=row.seal_pos)


async def _filtered(db: AsyncSession, query: Select[tuple[AuditRow]],
                    f: Filters) -> Select[tuple[AuditRow]]:
    if f.user is not None:
        found = await db.scalar(select(UserRow.id).where(
            or_(UserRow.username == f.user, UserRow.id == f.user)))
        query = query.where(AuditRow.actor_id == found if found else
                            AuditRow.actor_name == f.user)
    if f.action is not None:
        query = query.where(AuditRow.action.like(f.action[:-1].replace("%", r"\%")
                                                 .replace("_", r"\_") + "%", escape="\\")
                            if f.action.endswith("*") else AuditRow.action == f.action)
    if f.target is not None:
        kind, _, ident = f.target.rpartition(":")
        query = query.where(AuditRow.target_id == ident)
        if kind:
            query = query.where(AuditRow.target_type == kind)
    if f.outcome is not None:
        if f.outcome not in OUTCOMES:
            raise InvalidRequest(f"outcome {f.outcome!r} is none of {', '.join(OUTCOMES)}",
                                 field="outcome")
        query = query.where(AuditRow.outcome == f.outcome)
    if f.since is not None:
        query = query.where(AuditRow.at >= f.since)
    if f.until is not None:
        query = query.where(AuditRow.at < f.until)
    return query


async def _page(db: AsyncSession, query: Select[tuple[AuditRow]], limit: int,
                after: str | None) -> AuditPage:
    if after is not None:
        at, seq = _position(after)
        query = query.where(or_(AuditRow.at < at, and_(AuditRow.at == at, AuditRow.seq < seq)))
    rows = (await db.scalars(query.order_by(AuditRow.at.desc(), AuditRow.seq.desc())
                             .limit(limit + 1))).all()
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    return AuditPage(items=[public(r) for r in rows], limit=limit,
                     next=f"{last.at.isoformat()}~{last.seq}" if last else None)


def _position(after: str) -> tuple[datetime, int]:
    at, _, seq = after.rpartition("~")
    try:
        return datetime.fromisoformat(at), int(seq)
    except ValueError:
        raise InvalidRequest("`after` is not a position this listing gave (its `next`)",
                             field="after") from None
