"""Renaming and deleting projects (admins).

Everything that belongs to a project refers to it by id (sessions, folders, members, priority
classes' limits, usage through its sessions), so a rename changes one column and keeps all of it.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.projects import ProjectPublic
from gpuslice.common.schemas.sessions import FINAL
from gpuslice.manager.db.models import (
    FolderRow,
    PriorityClassRow,
    ProjectRow,
    RunRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.db.project_models import PriorityClassProjectRow
from gpuslice.manager.errors import Conflict, InvalidRequest
from gpuslice.manager.services.projects.service import get_project, public


async def rename_project(db: AsyncSession, viewer: UserRow, name: str, new: str
                         ) -> ProjectPublic:
    row = _not_personal(await get_project(db, viewer, name), "renamed")
    row.name = new
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"project {new!r} already exists", field="name",
                       code="project_exists") from None
    return await public(db, row)


async def delete_project(db: AsyncSession, viewer: UserRow, name: str) -> None:
    """Refused (one line naming them) while sessions not ended, folders or runs hold it, or a
    priority class is limited to it alone (it would become every project's). Its ended
    sessions keep their history and usage, in no project."""
    row = _not_personal(await get_project(db, viewer, name), "deleted")
    held = await _holders(db, row.id)
    if held:
        raise Conflict(f"project {row.name} still has {'; '.join(held)}", field="name",
                       code="project_in_use")
    project_name, row_id = row.name, row.id
    await db.execute(update(SessionRow).where(SessionRow.project_id == row.id,
                                              SessionRow.status.in_(list(FINAL)))
                     .values(project_id=None))
    await db.delete(row)
    try:
        await db.commit()
    except IntegrityError:  # a session or folder made in it meanwhile (their RESTRICT keys)
        await db.rollback()
        held = await _holders(db, row_id)
        raise Conflict(f"project {project_name} got new sessions or folders meanwhile; it "
                       f"still has {'; '.join(held) or 'them'}", field="name",
                       code="project_in_use") from None


def _not_personal(row: ProjectRow, verb: str) -> ProjectRow:
    if row.personal_of is not None:
        raise InvalidRequest(f"{row.name} is a personal project: it follows its user and "
                             f"cannot be {verb}", field="project", code="personal_project")
    return row


async def _holders(db: AsyncSession, project_id: str) -> list[str]:
    sessions = await db.scalar(select(func.count()).select_from(SessionRow).where(
        SessionRow.project_id == project_id, SessionRow.status.not_in(list(FINAL))))
    folders = await db.scalar(select(func.count()).select_from(FolderRow).where(
        FolderRow.project_id == project_id))
    runs = await db.scalar(select(func.count()).select_from(RunRow).join(
        SessionRow, SessionRow.id == RunRow.session_id).where(
        SessionRow.project_id == project_id))
    held = [f"{n} {what}" for n, what in ((sessions, "session(s) not ended"),
                                          (folders, "folder(s)"), (runs, "run(s)")) if n]
    classes = await _classes_limited_to(db, project_id)
    if classes:
        held.append(f"priority class(es) usable by it alone: {', '.join(classes)}")
    return held


async def _classes_limited_to(db: AsyncSession, project_id: str) -> list[str]:
    mine = select(PriorityClassProjectRow.class_id).where(
        PriorityClassProjectRow.project_id == project_id)
    alone = (select(PriorityClassProjectRow.class_id)
             .where(PriorityClassProjectRow.class_id.in_(mine))
             .group_by(PriorityClassProjectRow.class_id).having(func.count() == 1))
    return list((await db.scalars(select(PriorityClassRow.name).where(
        PriorityClassRow.id.in_(alone)).order_by(PriorityClassRow.name))).all())
