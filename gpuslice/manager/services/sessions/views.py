"""Reading sessions: who may see which, listing, and the public shape of one session."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, func, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal, slice_fraction
from gpuslice.common.schemas.common import Page, ResourcesPublic
from gpuslice.common.schemas.sessions import (
    HOLDING,
    AllocationPublic,
    PlacementPublic,
    SessionPublic,
    SessionResult,
    SessionStatus,
    SessionType,
    StatusChange,
)
from gpuslice.common.schemas.storage import SessionFolder
from gpuslice.common.schemas.users import Role
from gpuslice.common.text import scrub
from gpuslice.manager.db.base import UTCDateTime
from gpuslice.manager.db.models import (
    AllocationRow,
    NodeRow,
    ProjectRow,
    SessionRow,
    StatusHistoryRow,
    UserRow,
)
from gpuslice.manager.errors import Forbidden, InvalidRequest, NotFound


def visible(stmt: Select, viewer: UserRow) -> Select:  # type: ignore[type-arg]
    """Restrict a query on sessions to those ``viewer`` may see: admins all, users their own."""
    if viewer.role == Role.ADMIN:
        return stmt
    return stmt.where(SessionRow.owner_id == viewer.id)


def visible_history(stmt: Select, viewer: UserRow) -> Select:  # type: ignore[type-arg]
    """The same rule for status-history rows (they carry their session's owner)."""
    if viewer.role == Role.ADMIN:
        return stmt
    return stmt.where(StatusHistoryRow.owner_id == viewer.id)


async def get_visible(db: AsyncSession, viewer: UserRow, session_id: str) -> SessionRow:
    """The session if ``viewer`` may see it; otherwise ``NotFound`` (never "forbidden", so a user
    cannot probe other users' session ids)."""
    row = await db.scalar(visible(select(SessionRow).where(SessionRow.id == session_id), viewer))
    await db.commit()  # the gate of routes that wait (logs, exec): hold no transaction meanwhile
    if row is None:
        raise NotFound(f"no session {session_id}", field="session_id")
    return row


async def list_sessions(
    db: AsyncSession,
    viewer: UserRow,
    *,
    statuses: Sequence[SessionStatus] = (),
    owner: str | None = None,
    mine: bool = False,
    name: str | None = None,
    kind: SessionType | None = None,
    limit: int = 100,
    offset: int = 0,
    after: str | None = None,
    max_bytes: int | None = None,
) -> Page[SessionPublic]:
    """Newest first; ``owner`` (an admin's filter, or a user naming themselves) is a username
    or a user id, ``mine`` the viewer's own sessions (an admin's too), ``name`` exact.
    With ``max_bytes``, the page stops early (at least one item) once its answer would pass
    that size: continue from ``offset`` + the items returned, or from the page's ``next``.

    ``after`` (a page's ``next``) starts the page just past the item it names, read in the
    listing's index order (created, id): no row before it is read, whatever the page."""
    if after is not None and offset:
        raise InvalidRequest("give either `after` or `offset`, not both", field="after")
    where: list[ColumnElement[bool]] = []
    if statuses:
        where.append(SessionRow.status.in_(list(statuses)))
    if name is not None:  # names repeat (count > 1, reuse after destroy): newest first decides
        where.append(SessionRow.name == name)
    if kind is not None:
        where.append(SessionRow.type == kind)
    if mine:
        where.append(SessionRow.owner_id == viewer.id)
    if owner is not None:
        owner_id = await db.scalar(
            select(UserRow.id).where((UserRow.username == owner) | (UserRow.id == owner))
        )
        if viewer.role != Role.ADMIN and owner_id != viewer.id:
            raise Forbidden("only admins list other users' sessions", field="owner")
        where.append(SessionRow.owner_id == (owner_id or owner))
    counted = visible(select(func.count()).select_from(SessionRow), viewer).where(*where)
    total = await db.scalar(counted)
    page = visible(_described(), viewer).where(*where)
    if after is not None:
        created, last_id = _cursor_position(after)
        page = page.where(tuple_(SessionRow.created_at, SessionRow.id)
                          < tuple_(literal(created, UTCDateTime()), literal(last_id)))
    page = page.order_by(SessionRow.created_at.desc(), SessionRow.id.desc())
    read = (await db.execute(page.limit(limit + 1).offset(offset))).all()  # one more: is
    rows = read[:limit]  # there a next page?
    held = await _held(db, rows)
    kept = _within(rows, held, max_bytes)
    items = [to_public(row, held.get(row.id, ())) for row in kept]
    await db.commit()
    more = len(read) > limit or len(kept) < len(rows)
    return Page(items=items, total=total or 0, limit=limit, offset=offset,
                next=_cursor(kept[-1]) if kept and more else None)


def _cursor(row: Row[Any]) -> str:
    """Opaque to clients: where the listing stands (the last item's created time and id)."""
    raw = f"{row.created_at.isoformat()}|{row.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_position(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, last_id = raw.split("|", 1)
        at = datetime.fromisoformat(created)
        if at.tzinfo is None or not last_id:
            raise ValueError(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest(
            "`after` is not a position this listing gave: pass a page's `next` as it came",
            field="after",
        ) from None
    return at, last_id


async def describe(db: AsyncSession, session_id: str, *, history: bool = True) -> SessionPublic:
    """One session with its placement and (by default) its whole status history."""
    row = (await db.execute(_described().where(SessionRow.id == session_id))).one()
    held = await _held(db, [row])
    changes = None
    if history:
        rows = await db.scalars(
            select(StatusHistoryRow)
            .where(StatusHistoryRow.session_id == session_id)
            .order_by(StatusHistoryRow.id)
        )
        changes = [change_of(h) for h in rows]
    await db.commit()
    return to_public(row, held.get(row.id, ()), history=changes)


async def describe_many(db: AsyncSession, ids: Sequence[str]) -> list[SessionPublic]:
    rows = (await db.execute(_described().where(SessionRow.id.in_(list(ids))))).all()
    held = await _held(db, rows)
    await db.commit()
    by_id = {r.id: to_public(r, held.get(r.id, ())) for r in rows}
    return [by_id[i] for i in ids if i in by_id]


def change_of(row: StatusHistoryRow) -> StatusChange:
    return StatusChange(
        id=row.id, session_id=row.session_id,
        from_status=SessionStatus(row.from_status) if row.from_status else None,
        status=SessionStatus(row.to_status), reason=scrub(row.reason), at=row.at,
    )


def to_public(
    row: Row[Any],
    allocations: Sequence[Row[Any]],
    history: list[StatusChange] | None = None,
) -> SessionPublic:
    """``row``: as ``_described()`` reads it; ``allocations``: its slices held now."""
    return _public(row, row.owner_name, row.node_name, allocations, history, row.project_name)


def created_public(row: SessionRow, owner_name: str, project: str | None = None
                   ) -> SessionPublic:
    """A session just inserted (PENDING, nowhere yet), answered from what was written rather
    than read back: the create's answer then costs no query, and no read competes with the
    scheduling pass its commit woke."""
    return _public(row, owner_name, None, (), None, project)


def _public(
    row: Any,
    owner_name: str,
    node_name: str | None,
    allocations: Sequence[Row[Any]],
    history: list[StatusChange] | None,
    project: str | None = None,
) -> SessionPublic:
    status = SessionStatus(row.status)
    placement = None
    if row.node_id is not None and node_name is not None:
        placement = PlacementPublic(
            node_id=row.node_id, node_name=node_name,
            devices=[_slice(a) for a in allocations],
        )
    # Stored text is answered as it is, but for what no answer can carry (text.scrub): one bad
    # row must never break a listing.
    return SessionPublic(
        id=row.id, name=scrub(row.name), owner_id=row.owner_id, owner=owner_name,
        image=scrub(row.image), type=SessionType(row.type), command=scrub(row.command),
        env=scrub(row.env), priority=row.priority, priority_class=row.priority_class,
        preemptions=row.preemptions or 0,
        resources=ResourcesPublic.of(row.gpu, row.cpu, row.mem, row.gpu_mem),
        gpu_model=scrub(row.gpu_model), project=project, group=row.pool or None,
        status=status, status_reason=scrub(row.status_reason),
        wait_code=row.wait_code if status is SessionStatus.PENDING else None,
        queue_position=row.queue_position if status is SessionStatus.PENDING else None,
        result=SessionResult(row.result) if row.result else None, exit_code=row.exit_code,
        placement=placement, created_at=row.created_at, updated_at=row.updated_at,
        folders=[SessionFolder(**f) for f in row.folders or []],
        purged_at=row.purged_at, history=history, time_limit=row.time_limit,
        begin_at=row.begin_at, ends_at=row.ends_at if status in HOLDING else None,
    )


def _within(
    rows: Sequence[Row[Any]], held: dict[str, list[Row[Any]]], max_bytes: int | None
) -> Sequence[Row[Any]]:
    if max_bytes is None:
        return rows
    size = 0
    for count, row in enumerate(rows):
        size += _answer_bytes(row, len(held.get(row.id, ())))
        if size > max_bytes and count > 0:
            return rows[:count]
    return rows


def _answer_bytes(row: Row[Any], slices: int) -> int:
    # An upper estimate of one item in a JSON answer: its free text (each character at most
    # six bytes escaped) and the fixed fields around it.
    text = [row.name, row.image, row.status_reason, *(row.command or ()), *row.env.keys(),
            *row.env.values()]
    return 1024 + 256 * slices + 6 * sum(len(t) for t in text)


def _described() -> Select:  # type: ignore[type-arg]
    """Sessions as answers show them: plain rows (a page of mapped objects cost a listing a
    third of its time), the columns ``to_public`` reads, with the owner's and node's names."""
    return (
        select(*_PUBLIC_COLUMNS, UserRow.username.label("owner_name"),
               NodeRow.name.label("node_name"), ProjectRow.name.label("project_name"))
        .join(UserRow, UserRow.id == SessionRow.owner_id)
        .outerjoin(NodeRow, NodeRow.id == SessionRow.node_id)
        .outerjoin(ProjectRow, ProjectRow.id == SessionRow.project_id)
    )


_PUBLIC_COLUMNS = (
    SessionRow.id, SessionRow.name, SessionRow.owner_id, SessionRow.image, SessionRow.type,
    SessionRow.command, SessionRow.env, SessionRow.priority, SessionRow.gpu, SessionRow.cpu,
    SessionRow.mem, SessionRow.gpu_mem, SessionRow.gpu_model, SessionRow.status,
    SessionRow.status_reason, SessionRow.wait_code, SessionRow.queue_position,
    SessionRow.result, SessionRow.exit_code, SessionRow.node_id, SessionRow.created_at,
    SessionRow.updated_at, SessionRow.folders, SessionRow.purged_at, SessionRow.pool,
    SessionRow.time_limit, SessionRow.begin_at, SessionRow.ends_at, SessionRow.priority_class,
    SessionRow.preemptions,
)


async def _held(db: AsyncSession, rows: Sequence[Row[Any]]) -> dict[str, list[Row[Any]]]:
    """The slices each placed session of ``rows`` holds now, by session, in device order."""
    placed = [row.id for row in rows if row.node_id is not None]
    if not placed:
        return {}
    held: dict[str, list[Row[Any]]] = {}
    for a in await db.execute(
        select(AllocationRow.session_id, AllocationRow.device_index, AllocationRow.device_uuid,
               AllocationRow.device_model, AllocationRow.device_capacity, AllocationRow.gpu,
               AllocationRow.mem, AllocationRow.sms)
        .where(AllocationRow.session_id.in_(placed), AllocationRow.released_at.is_(None))
        .order_by(AllocationRow.session_id, AllocationRow.device_index)
    ):
        held.setdefault(a.session_id, []).append(a)
    return held


def _slice(a: Row[Any]) -> AllocationPublic:
    return AllocationPublic(
        device_index=a.device_index, device_uuid=a.device_uuid, device_model=a.device_model,
        gpu=fgpu_decimal(a.gpu),
        fraction=slice_fraction(a.gpu, a.device_capacity),
        mem=a.mem, sms=a.sms,
    )
