"""Priority classes: admin-defined ranks, one of them the default.

A new platform gets the default "normal" (rank 0) with its first admin; an upgraded one from
migration 0027, which also puts every existing session in it.

Invariants: at most one class is the default (making one the default clears the others in the
same transaction); a class in use by a session that is not over, or the default, cannot be
deleted, so every unfinished session's class exists. A session names its class; its rank is
read at every pass, so an admin's change of rank applies to the queue at once.

Using a class is a grant (F8 of the 2026-12 security review): the default class is every
project's; another one is every project's with ``any_project``, else the projects of
``priority_class_projects`` (by project id, so a rename keeps it), and with neither it is its
admins' alone. A user sees (lists, and is told of) the classes a project of theirs may use; a
class they cannot see is refused as one that does not exist, with the same words, so its name
stays private. One they see but the session's project may not use is refused naming those it
may.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select, update
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
    db.add(PriorityClassRow(**DEFAULT, is_default=True, any_project=True))


async def rules(db: AsyncSession) -> dict[str, ClassRule]:
    """Every class by name, as the scheduler reads them (a small table: read whole)."""
    rows = await db.scalars(select(PriorityClassRow))
    return {r.name: ClassRule(r.name, r.rank, r.min_runtime_s, r.grace_s, r.preempt_interactive)
            for r in rows}


async def resolve(
    db: AsyncSession, name: str | None, project: ProjectRow | None = None,
    user: UserRow | None = None,
) -> PriorityClassRow | None:
    """The class a new session of ``user`` in ``project`` gets: the one named, else the
    default (``None`` when there is none). A name that is no class ``user`` may see is
    ``InvalidRequest`` naming those they may use (an unknown one the same); one ``project`` may
    not use is ``Forbidden`` naming those it may. Without ``project``: only that it exists."""
    if name is None:
        return await db.scalar(select(PriorityClassRow).where(PriorityClassRow.is_default))
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if project is None or user is None:
        if row is None:
            raise _unknown(name, None)
        return row
    grants = await _grants(db)
    mine = await _projects_of(db, user)
    if row is None or not _sees(row, grants, user, mine):
        raise _unknown(name, await _usable(db, grants, project, user))
    if not _may_use(row, grants, project, user):
        usable = await _usable(db, grants, project, user)
        raise Forbidden(f"project {project.name} may not use priority class {row.name}; the "
                        f"classes it may use: {', '.join(usable) or 'none'} (or ask an admin "
                        f"to let project {project.name} use {row.name})",
                        field="priority_class", code="priority_class_not_allowed")
    return row


async def list_classes(db: AsyncSession, viewer: UserRow) -> list[PriorityClassPublic]:
    """Every class, highest rank first, then by name. A user who is no admin sees those a
    project of theirs may use, limited to their own projects' names: never another's."""
    rows = (await db.scalars(select(PriorityClassRow).order_by(
        PriorityClassRow.rank.desc(), PriorityClassRow.name))).all()
    limits = await project_names(db)
    if viewer.role == Role.ADMIN:
        return [public(row, limits.get(row.id, [])) for row in rows]
    grants = await _grants(db)
    mine = await _projects_of(db, viewer)
    names = set((await db.scalars(select(ProjectRow.name).where(
        ProjectRow.id.in_(mine)))).all()) if mine else set()
    return [public(row, [n for n in limits.get(row.id, []) if n in names])
            for row in rows if _sees(row, grants, viewer, mine)]


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


async def set_projects(db: AsyncSession, row: PriorityClassRow, names: list[str],
                       any_project: bool = False) -> list[str]:
    """Grant ``row`` to the projects ``names`` (replacing earlier grants), or to every project
    with ``any_project``; neither: its admins' alone. The sorted names. An unknown name is
    refused naming it; the default class cannot be limited."""
    wanted = sorted(set(names))
    if wanted and row.is_default:
        raise InvalidRequest(f"{row.name} is the default class, which every project may use: "
                             "make another one the default first", field="projects",
                             code="default_class_limited")
    if wanted and any_project:
        raise InvalidRequest("give projects or any_project, not both: any_project already "
                             "lets every project use it", field="projects",
                             code="projects_and_any_project")
    found = dict((await db.execute(select(ProjectRow.name, ProjectRow.id).where(
        ProjectRow.name.in_(wanted)))).tuples().all())
    missing = [n for n in wanted if n not in found]
    if missing:
        raise InvalidRequest(f"projects: no project {missing[0]!r}", field="projects",
                             code="unknown_project")
    row.any_project = any_project
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
        projects = await set_projects(db, row, body.projects, body.any_project)
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
    if body.projects is not None or body.any_project is not None:
        any_project = bool(body.any_project)
        kept = [] if any_project else projects  # any_project alone: instead of the projects
        projects = await set_projects(db, row, kept if body.projects is None else body.projects,
                                      any_project)
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
        any_project=row.any_project or row.is_default, projects=projects,
        **{k: getattr(row, k) for k in _FIELDS},
    )


def _unknown(name: str, usable: list[str] | None) -> InvalidRequest:
    said = "" if usable is None else f"; the classes you may use: {', '.join(usable) or 'none'}"
    return InvalidRequest(f"no priority class {name!r}{said} (an admin grants others: ask "
                          "them to let your project use the one you need)",
                          field="priority_class", code="unknown_priority_class")


async def _grants(db: AsyncSession) -> dict[str, set[str]]:
    """Each class granted to projects: class id → those projects' ids."""
    pairs = (await db.execute(select(PriorityClassProjectRow.class_id,
                                     PriorityClassProjectRow.project_id))).tuples()
    grants: dict[str, set[str]] = {}
    for class_id, project_id in pairs:
        grants.setdefault(class_id, set()).add(project_id)
    return grants


async def _projects_of(db: AsyncSession, user: UserRow) -> set[str]:
    return set((await db.scalars(member_of(user))).all())


def _open(row: PriorityClassRow) -> bool:
    return row.is_default or row.any_project


def _sees(row: PriorityClassRow, grants: dict[str, set[str]], user: UserRow,
          mine: set[str]) -> bool:
    """Whether ``user`` may know of ``row``: a project of theirs may use it."""
    return user.role == Role.ADMIN or _open(row) or bool(grants.get(row.id, set()) & mine)


def _may_use(row: PriorityClassRow, grants: dict[str, set[str]], project: ProjectRow,
             user: UserRow) -> bool:
    granted = grants.get(row.id)
    if _open(row) or (granted and project.id in granted):
        return True
    return not granted and user.role == Role.ADMIN  # granted to no project: admins'


async def _usable(db: AsyncSession, grants: dict[str, set[str]], project: ProjectRow,
                  user: UserRow) -> list[str]:
    """The classes ``user`` may use in ``project``, highest rank first."""
    rows = (await db.scalars(select(PriorityClassRow).order_by(
        PriorityClassRow.rank.desc(), PriorityClassRow.name))).all()
    return [row.name for row in rows if _may_use(row, grants, project, user)]


async def _clear_default(db: AsyncSession) -> None:
    await db.execute(update(PriorityClassRow).where(PriorityClassRow.is_default.is_(True))
                     .values(is_default=False))


async def _get(db: AsyncSession, name: str) -> PriorityClassRow:
    row = await db.scalar(select(PriorityClassRow).where(PriorityClassRow.name == name))
    if row is None:
        raise NotFound(f"no priority class {name!r} (GET /api/v1/priority-classes lists them)",
                       field="name", code="unknown_priority_class")
    return row
