"""Projects as admins manage them and members see them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from sqlalchemy import CompoundSelect, delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import Resources, fgpu_decimal
from gpuslice.common.schemas.projects import (
    ProjectCreate,
    ProjectPublic,
    ProjectQuotas,
    ProjectUpdate,
    ProjectUsage,
)
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import ProjectMemberRow, ProjectRow, SessionRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound, StaleStatus
from gpuslice.manager.services.lifecycle import transition

QUOTA_FIELDS = ("max_sessions", "max_gpu", "max_cpu", "max_mem", "max_storage",
                "max_gpu_models", "groups", "default_time_limit", "max_time_limit")


async def create_project(db: AsyncSession, body: ProjectCreate) -> ProjectPublic:
    row = ProjectRow(name=body.name, description=body.description, **_quotas(body))
    db.add(row)
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"project {body.name!r} already exists", field="name") from None
    return await public(db, row)


async def list_projects(db: AsyncSession, viewer: UserRow) -> list[ProjectPublic]:
    """Admins: every project but other users' personal ones; users: those they may launch in
    (their personal one first)."""
    await personal_project(db, viewer)
    await db.commit()
    stmt = select(ProjectRow).order_by(ProjectRow.name)
    if viewer.role == Role.ADMIN:
        stmt = stmt.where((ProjectRow.personal_of.is_(None))
                          | (ProjectRow.personal_of == viewer.id))
    else:
        stmt = stmt.where(ProjectRow.id.in_(member_of(viewer)))
    rows = (await db.scalars(stmt)).all()
    return [await public(db, row) for row in rows]


async def get_project(db: AsyncSession, viewer: UserRow, name: str) -> ProjectRow:
    """The project named ``name`` (or by id) if ``viewer`` may see it: admins any, users their
    own; otherwise NotFound, as for none (a user never learns another's project exists)."""
    stmt = select(ProjectRow).where((ProjectRow.name == name) | (ProjectRow.id == name))
    if viewer.role != Role.ADMIN:
        stmt = stmt.where(ProjectRow.id.in_(member_of(viewer)))
    row = await db.scalar(stmt)
    if row is None:
        if name == f"~{viewer.username}":  # a personal project made on first use
            return await personal_project(db, viewer)
        raise NotFound(f"no project {name}", field="project")
    return row


async def update_project(
    db: AsyncSession, viewer: UserRow, name: str, body: ProjectUpdate
) -> ProjectPublic:
    row = await get_project(db, viewer, name)
    for key, value in _quotas(body).items():
        setattr(row, key, value)
    if body.description is not None:
        row.description = body.description
    await db.commit()
    return await public(db, row)


async def add_member(db: AsyncSession, viewer: UserRow, name: str, username: str
                     ) -> ProjectPublic:
    row, user = await _project_and_user(db, viewer, name, username)
    held = await db.get(ProjectMemberRow, (row.id, user.id))
    if held is None:
        db.add(ProjectMemberRow(project_id=row.id, user_id=user.id))
        await db.commit()
    elif held.source != "manual":  # an admin's add outlives the provider's group
        held.source = "manual"
        await db.commit()
    return await public(db, row)


async def remove_member(db: AsyncSession, viewer: UserRow, name: str, username: str
                        ) -> ProjectPublic:
    """Their PENDING sessions in the project end (CANCELLED, "removed from project <name>") in
    the same transaction, so none starts afterwards; placed and RUNNING ones keep running; new
    ones are refused."""
    row, user = await _project_and_user(db, viewer, name, username)
    await db.execute(delete(ProjectMemberRow).where(
        ProjectMemberRow.project_id == row.id, ProjectMemberRow.user_id == user.id))
    await cancel_pending(db, row, user.id)
    await db.commit()
    return await public(db, row)


async def personal_project(db: AsyncSession, user: UserRow) -> ProjectRow:
    """The user's personal project, made on first use for a user who has none yet (one made
    by a request racing this one is taken instead: a savepoint keeps the caller's work)."""
    mine = select(ProjectRow).where(ProjectRow.personal_of == user.id)
    row = await db.scalar(mine)
    if row is not None:
        return row
    try:
        async with db.begin_nested():
            row = ProjectRow(name=f"~{user.username}", description="", personal_of=user.id)
            db.add(row)
    except IntegrityError:
        row = await db.scalar(mine)
        if row is None:
            raise
    return row


def member_of(user: UserRow) -> CompoundSelect[tuple[str]]:
    """A query of the ids of the projects ``user`` may launch in (theirs and their personal
    one), for ``in_``."""
    members = select(ProjectMemberRow.project_id).where(ProjectMemberRow.user_id == user.id)
    return members.union(select(ProjectRow.id).where(ProjectRow.personal_of == user.id))


async def public(db: AsyncSession, row: ProjectRow) -> ProjectPublic:
    names = (await db.scalars(
        select(UserRow.username).join(ProjectMemberRow, ProjectMemberRow.user_id == UserRow.id)
        .where(ProjectMemberRow.project_id == row.id).order_by(UserRow.username)
    )).all()
    if row.personal_of is not None:
        names = [row.name[1:]]
    count, used = (await usage_of(db, [row.id])).get(row.id, (0, Resources()))
    models = row.max_gpu_models
    return ProjectPublic(
        id=row.id, name=row.name, description=row.description,
        personal=row.personal_of is not None, members=list(names),
        max_sessions=row.max_sessions, max_gpu=_fgpu(row.max_gpu), max_cpu=_fgpu(row.max_cpu),
        max_mem=row.max_mem, max_storage=row.max_storage,
        max_gpu_models=None if models is None else {
            k: fgpu_decimal(v) for k, v in models.items()},
        groups=row.groups, default_time_limit=row.default_time_limit,
        max_time_limit=row.max_time_limit,
        usage=ProjectUsage(sessions=count, gpu=fgpu_decimal(used.gpu),
                           cpu=fgpu_decimal(used.cpu), mem=used.mem),
        created_at=row.created_at,
    )


async def usage_of(
    db: AsyncSession, project_ids: Iterable[str]
) -> dict[str, tuple[int, Resources]]:
    """What each project's allocated sessions hold now: (sessions, resources)."""
    rows = (await db.execute(
        select(SessionRow.project_id, func.count(), func.sum(SessionRow.gpu),
               func.sum(SessionRow.cpu), func.sum(SessionRow.mem))
        .where(SessionRow.status.in_(list(HOLDING)),
               SessionRow.project_id.in_(list(project_ids)))
        .group_by(SessionRow.project_id)
    )).all()
    return {p: (n, Resources(int(g), int(c), int(m))) for p, n, g, c, m in rows}


def _quotas(body: ProjectQuotas) -> dict[str, Any]:
    values = body.model_dump(include=set(QUOTA_FIELDS))
    if values["groups"] is not None:
        values["groups"] = sorted(set(values["groups"]))
    return values


def _fgpu(value: int | None) -> Any:
    return None if value is None else fgpu_decimal(value)


async def _project_and_user(
    db: AsyncSession, viewer: UserRow, name: str, username: str
) -> tuple[ProjectRow, UserRow]:
    row = await get_project(db, viewer, name)
    if row.personal_of is not None:
        raise InvalidRequest(f"{row.name} is a personal project: it has no other members",
                             field="project", code="personal_project")
    user = await db.scalar(select(UserRow).where(UserRow.username == username))
    if user is None:
        raise NotFound(f"no user {username}", field="username")
    return row, user


async def cancel_pending(db: AsyncSession, project: ProjectRow, user_id: str,
                         reason: str | None = None) -> None:
    """End the user's PENDING sessions in ``project`` (they left it)."""
    rows = (await db.scalars(select(SessionRow).where(
        SessionRow.project_id == project.id, SessionRow.owner_id == user_id,
        SessionRow.status == SessionStatus.PENDING))).all()
    for row in rows:
        # placed meanwhile by the scheduler (the UPDATE matched nothing, so nothing changed):
        # it runs on, as the member's running sessions do
        with contextlib.suppress(StaleStatus):
            await transition(db, row, SessionStatus.CANCELLED,
                             reason or f"removed from project {project.name}")
