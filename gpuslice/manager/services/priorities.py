"""Priority classes: admin-defined ranks, readable by every user, one of them the default.

A new platform gets the default "normal" (rank 0) with its first admin; an upgraded one from
migration 0027, which also puts every existing session in it.

Invariants: at most one class is the default (making one the default clears the others in the
same transaction); a class in use by a session that is not over, or the default, cannot be
deleted, so every unfinished session's class exists. A session names its class; its rank is
read at every pass, so an admin's change of rank applies to the queue at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.priorities import (
    PriorityClassCreate,
    PriorityClassPublic,
    PriorityClassUpdate,
)
from gpuslice.common.schemas.sessions import FINAL
from gpuslice.manager.db.models import PriorityClassRow, SessionRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound

DEFAULT = {"name": "normal", "rank": 0, "min_runtime_s": 600, "grace_s": 30,
           "preempt_interactive": False}
_FIELDS = ("rank", "min_runtime_s", "grace_s", "preempt_interactive")


@dataclass(frozen=True, slots=True)
class ClassRule:
    """What the scheduler needs of a class (a session of no known class: ``NONE``)."""

    name: str | None
    rank: int
    min_runtime_s: int
    grace_s: int | None
    preempt_interactive: bool


NONE = ClassRule(None, 0, 0, None, False)


def add_default(db: AsyncSession) -> None:
    """Add the platform's default class (a new platform's first start)."""
    db.add(PriorityClassRow(**DEFAULT, is_default=True))


async def rules(db: AsyncSession) -> dict[str, ClassRule]:
    """Every class by name, as the scheduler reads them (a small table: read whole)."""
    rows = await db.scalars(select(PriorityClassRow))
    return {r.name: ClassRule(r.name, r.rank, r.min_runtime_s, r.grace_s, r.preempt_interactive)
            for r in rows}


async def resolve(db: AsyncSession, name: str | None) -> PriorityClassRow | None:
    """The class a new session gets: the one named (``InvalidRequest`` naming those that exist
    when there is none of that name), else the default (``None`` when there is none)."""
    if name is None:
        return await db.scalar(select(PriorityClassRow).where(PriorityClassRow.is_default))
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if row is None:
        names = (await db.scalars(select(PriorityClassRow.name)
                                  .order_by(PriorityClassRow.rank))).all()
        known = ", ".join(names) if names else "none exist"
        raise InvalidRequest(f"no priority class {name!r}; the classes are: {known}",
                             field="priority_class", code="unknown_priority_class")
    return row


async def list_classes(db: AsyncSession) -> list[PriorityClassPublic]:
    """Every class, highest rank first, then by name."""
    rows = await db.scalars(select(PriorityClassRow).order_by(
        PriorityClassRow.rank.desc(), PriorityClassRow.name))
    return [public(row) for row in rows]


async def create_class(db: AsyncSession, body: PriorityClassCreate) -> PriorityClassPublic:
    if body.default:
        await _clear_default(db)
    row = PriorityClassRow(name=body.name, is_default=body.default,
                           **{k: getattr(body, k) for k in _FIELDS})
    db.add(row)
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"priority class {body.name!r} already exists", field="name",
                       code="priority_class_exists") from None
    return public(row)


async def update_class(
    db: AsyncSession, name: str, body: PriorityClassUpdate
) -> PriorityClassPublic:
    row = await _get(db, name)
    for key in _FIELDS:
        value = getattr(body, key)
        if value is not None:
            setattr(row, key, value)
    if body.default is not None:
        if not body.default and row.is_default:
            raise InvalidRequest(f"{name} is the default class: make another one the default "
                                 "instead", field="default", code="default_class_needed")
        if body.default:
            await _clear_default(db)
        row.is_default = body.default
    await db.commit()
    return public(row)


async def delete_class(db: AsyncSession, name: str) -> None:
    row = await _get(db, name)
    if row.is_default:
        raise Conflict(f"{name} is the default class: make another one the default first",
                       field="name", code="priority_class_in_use")
    using = await db.scalar(select(func.count()).select_from(SessionRow).where(
        SessionRow.priority_class == name, SessionRow.status.not_in(list(FINAL))))
    if using:
        raise Conflict(f"{using} session(s) not over yet are of class {name}; delete it once "
                       "they end", field="name", code="priority_class_in_use")
    await db.delete(row)
    await db.commit()


def public(row: PriorityClassRow) -> PriorityClassPublic:
    return PriorityClassPublic(
        id=row.id, name=row.name, default=row.is_default, created_at=row.created_at,
        **{k: getattr(row, k) for k in _FIELDS},
    )


async def _clear_default(db: AsyncSession) -> None:
    await db.execute(update(PriorityClassRow).where(PriorityClassRow.is_default.is_(True))
                     .values(is_default=False))


async def _get(db: AsyncSession, name: str) -> PriorityClassRow:
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if row is None:
        raise NotFound(f"no priority class {name!r} (GET /api/v1/priority-classes lists them)",
                       field="name", code="unknown_priority_class")
    return row
