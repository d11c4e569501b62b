"""Priority classes: admin-defined ranks, readable by every user, one of them the default.

A new platform gets the default "normal" (rank 0) with its first admin; an upgraded one from
migration 0027, which also puts every existing session in it.

Invariants: at most one class is the default (making one the default clears the others in the
same transaction); a class in use by a session that is not over, or the default, cannot be
deleted, so every unfinished session's class exists. A session names its class; its rank is
read at every pass, so an admin's change of rank applies to the queue at once.

A class may be limited to some projects (``priority_class_projects``, by project id, so a
rename keeps it; none: every project). A session or run naming a class its project may not use
is refused at creation, naming those it may. The default class is never limited: sessions that
name no class get it, whatever their project.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.priorities import (
    PriorityClassCreate,
    PriorityClassPublic,
    PriorityClassUpdate,
)
from gpuslice.common.schemas.sessions import FINAL
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import PriorityClassRow, ProjectRow, SessionRow, UserRow
from gpuslice.manager.db.project_models import PriorityClassProjectRow
from gpuslice.manager.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpuslice.manager.services.projects.service import member_of

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


async def resolve(
    db: AsyncSession, name: str | None, project: ProjectRow | None = None
) -> PriorityClassRow | None:
    """The class a new session gets: the one named (``InvalidRequest`` naming those that exist
    when there is none of that name; ``Forbidden`` naming those ``project`` may use when it may
    not use that one), else the default (``None`` when there is none)."""
    if name is None:
        return await db.scalar(select(PriorityClassRow).where(PriorityClassRow.is_default))
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if row is None:
        names = (await db.scalars(select(PriorityClassRow.name)
                                  .order_by(PriorityClassRow.rank))).all()
        known = ", ".join(names) if names else "none exist"
        raise InvalidRequest(f"no priority class {name!r}; the classes are: {known}",
                             field="priority_class", code="unknown_priority_class")
    if project is not None:
        await _check_usable(db, row, project)
    return row


async def list_classes(db: AsyncSession, viewer: UserRow) -> list[PriorityClassPublic]:
    """Every class, highest rank first, then by name. A user who is no admin sees those a
    project of theirs may use, limited to their own projects' names: never another's."""
    rows = (await db.scalars(select(PriorityClassRow).order_by(
        PriorityClassRow.rank.desc(), PriorityClassRow.name))).all()
    limits = await project_names(db)
    if viewer.role == Role.ADMIN:
        return [public(row, limits.get(row.id, [])) for row in rows]
    mine = set((await db.scalars(select(ProjectRow.name).where(
        ProjectRow.id.in_(member_of(viewer))))).all())
    shown = [(row, [n for n in limits.get(row.id, []) if n in mine]) for row in rows]
    return [public(row, names) for row, names in shown if names or row.id not in limits]


async def project_names(db: AsyncSession) -> dict[str, list[str]]:
    """Each limited class's projects by name (class id → sorted names)."""
    pairs = (await db.execute(
        select(PriorityClassProjectRow.class_id, ProjectRow.name)
        .join(ProjectRow, ProjectRow.id == PriorityClassProjectRow.project_id)
        .order_by(ProjectRow.name))).tuples()
    names: dict[str, list[str]] = {}
    for class_id, name in pairs:
        names.setdefault(class_id, []).append(name)
    return names


async def set_projects(db: AsyncSession, row: PriorityClassRow, names: list[str]) -> list[str]:
    """Limit ``row`` to the projects ``names`` (empty: every project); the sorted names.
    An unknown name is refused naming it; the default class cannot be limited."""
    wanted = sorted(set(names))
    if wanted and row.is_default:
        raise InvalidRequest(f"{row.name} is the default class, which every project may use: "
                             "make another one the default first", field="projects",
                             code="default_class_limited")
    found = dict((await db.execute(select(ProjectRow.name, ProjectRow.id).where(
        ProjectRow.name.in_(wanted)))).tuples().all())
    missing = [n for n in wanted if n not in found]
    if missing:
        raise InvalidRequest(f"projects: no project {missing[0]!r}", field="projects",
                             code="unknown_project")
    await db.flush()  # a new class's id
    await db.execute(delete(PriorityClassProjectRow).where(
        PriorityClassProjectRow.class_id == row.id))
    db.add_all(PriorityClassProjectRow(class_id=row.id, project_id=found[n]) for n in wanted)
    return wanted


async def create_class(db: AsyncSession, body: PriorityClassCreate) -> PriorityClassPublic:
    if body.default:
        await _clear_default(db)
    row = PriorityClassRow(name=body.name, is_default=body.default,
                           **{k: getattr(body, k) for k in _FIELDS})
    db.add(row)
    try:
        projects = await set_projects(db, row, body.projects)
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"priority class {body.name!r} already exists", field="name",
                       code="priority_class_exists") from None
    return public(row, projects)


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
    projects = (await project_names(db)).get(row.id, [])
    if body.projects is not None:
        projects = await set_projects(db, row, body.projects)
    elif row.is_default and projects:
        raise InvalidRequest(f"{name} may be used by {', '.join(projects)} only; the default "
                             "class is every project's: --any-project first",
                             field="default", code="default_class_limited")
    await db.commit()
    return public(row, projects)


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


def public(row: PriorityClassRow, projects: list[str]) -> PriorityClassPublic:
    return PriorityClassPublic(
        id=row.id, name=row.name, default=row.is_default, created_at=row.created_at,
        projects=projects, **{k: getattr(row, k) for k in _FIELDS},
    )


async def _check_usable(db: AsyncSession, row: PriorityClassRow, project: ProjectRow) -> None:
    limited_to = set((await db.scalars(select(PriorityClassProjectRow.project_id).where(
        PriorityClassProjectRow.class_id == row.id))).all())
    if not limited_to or project.id in limited_to:
        return
    limited = select(PriorityClassProjectRow.class_id)
    its_own = limited.where(PriorityClassProjectRow.project_id == project.id)
    usable = (await db.scalars(select(PriorityClassRow.name).where(
        or_(PriorityClassRow.id.not_in(limited), PriorityClassRow.id.in_(its_own)))
        .order_by(PriorityClassRow.rank.desc(), PriorityClassRow.name))).all()
    raise Forbidden(f"project {project.name} may not use priority class {row.name}; the "
                    f"classes it may use: {', '.join(usable) or 'none'}",
                    field="priority_class", code="priority_class_not_allowed")


async def _clear_default(db: AsyncSession) -> None:
    await db.execute(update(PriorityClassRow).where(PriorityClassRow.is_default.is_(True))
                     .values(is_default=False))


async def _get(db: AsyncSession, name: str) -> PriorityClassRow:
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if row is None:
        raise NotFound(f"no priority class {name!r} (GET /api/v1/priority-classes lists them)",
                       field="name", code="unknown_priority_class")
    return row
