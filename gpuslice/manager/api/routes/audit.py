"""The audit log: admins read and check it; every user reads their own security log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from gpuslice.common.limits import PAGE_DEFAULT, PAGE_MAX
from gpuslice.common.schemas.audit import AuditPage, AuditVerify
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep, SessionmakerDep
from gpuslice.manager.services.audit import chain, context, query

router = APIRouter(tags=["audit"])
Limit = Annotated[int, Query(ge=1, le=PAGE_MAX)]
After = Annotated[str | None, Query(max_length=80,
                                    description="A previous page's `next`.")]


@router.get("/audit")
async def list_audit(
    db: DbDep, _admin: AdminUser,
    user: Annotated[str | None, Query(max_length=128, description="Who acted: a username "
                                      "or user id (a failed login: the name tried).")] = None,
    action: Annotated[str | None, Query(max_length=64, description="An action, or a prefix "
                                        "ending in `*` (`auth.*`).")] = None,
    target: Annotated[str | None, Query(max_length=200, description="`type:id` "
                                        "(`session:ID`, `user:ID`) or an id.")] = None,
    outcome: Annotated[str | None, Query(max_length=16,
                                         description="success, failure or denied.")] = None,
    since: Annotated[datetime | None, Query(description="From this time (RFC 3339).")] = None,
    until: Annotated[datetime | None, Query(description="Before this time.")] = None,
    limit: Limit = PAGE_DEFAULT, after: After = None,
) -> AuditPage:
    """The audit log, newest first, filtered (admins only)."""
    filters = query.Filters(user=user, action=action, target=target, outcome=outcome,
                            since=since, until=until)
    return await query.listing(db, filters, limit, after)


@router.get("/audit/verify")
async def verify_audit(request: Request, db: DbDep, _admin: AdminUser) -> AuditVerify:
    """Seal what is committed, then walk the hash chain: whether every sealed row is as
    written, and the first position that is not (a row changed, deleted or inserted).
    Itself audited (`audit.verify`)."""
    key = request.app.state.audit_key
    while await chain.seal(db, key) == chain.BATCH:  # what is committed, sealed first
        pass
    verdict = await chain.verify(db, key)
    context.note(intact=verdict.intact, sealed_through=verdict.sealed_through)
    return AuditVerify(
        intact=verdict.intact, sealed_through=verdict.sealed_through,
        unsealed=verdict.unsealed, head_pos=verdict.head_pos, head_hash=verdict.head_hash,
        first_break=verdict.first_break, problem=verdict.problem)


@router.get("/audit/export", response_class=StreamingResponse)
async def export_audit(
    sessionmaker: SessionmakerDep, _admin: AdminUser,
    since: Annotated[datetime | None, Query(description="From this time (RFC 3339).")] = None,
) -> StreamingResponse:
    """The audit log as JSON lines (one object a row, seal included), in the order rows were
    written, for a SIEM or an archive (admins). Itself audited (`audit.export`)."""
    context.note(since=since.isoformat() if since else None)
    return StreamingResponse(query.export(sessionmaker, since),
                             media_type="application/x-ndjson")


@router.get("/auth/activity")
async def my_activity(
    db: DbDep, user: CurrentUser,
    since: Annotated[datetime | None, Query(description="From this time (RFC 3339).")] = None,
    limit: Limit = PAGE_DEFAULT, after: After = None,
) -> AuditPage:
    """Your own security log, newest first: your logins (address and method), failed logins
    on your name, tokens made and revoked, password changes, what admins did to your
    account."""
    return await query.activity(db, user, limit, since, after)
