"""Project membership from a provider's groups: add and remove only ``idp`` memberships."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.models import (
    ProjectIdpGroupRow,
    ProjectMemberRow,
    ProjectRow,
    UserRow,
)
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.projects.service import cancel_pending


async def sync_projects(db: AsyncSession, user: UserRow, provider: str,
                        groups: tuple[str, ...] | None) -> tuple[list[str], list[str]]:
    """Make ``user``'s ``idp`` memberships those of the projects linked to one of ``groups``;
    the names of the projects joined and left. ``groups`` None (not known): no change."""
    if groups is None:
        return [], []
    linked = (await db.execute(
        select(ProjectIdpGroupRow.project_id, ProjectIdpGroupRow.group_value)
        .where(ProjectIdpGroupRow.provider == provider))).all()
    wanted = {project_id for project_id, group in linked if group in set(groups)}
    rows = (await db.execute(select(ProjectMemberRow.project_id, ProjectMemberRow.source)
                             .where(ProjectMemberRow.user_id == user.id))).tuples().all()
    held: dict[str, str] = dict(rows)
    joined = sorted(wanted - held.keys())
    left = sorted(p for p, source in held.items() if source == "idp" and p not in wanted)
    for project_id in joined:
        db.add(ProjectMemberRow(project_id=project_id, user_id=user.id, source="idp"))
    names: dict[str, ProjectRow] = {
        p.id: p for p in await db.scalars(select(ProjectRow).where(
            ProjectRow.id.in_(joined + left)))}
    for project_id in left:
        await db.execute(delete(ProjectMemberRow).where(
            ProjectMemberRow.project_id == project_id, ProjectMemberRow.user_id == user.id,
            ProjectMemberRow.source == "idp"))
        await cancel_pending(db, names[project_id], user.id,
                             f"removed from project {names[project_id].name}: no longer in "
                             f"a group linked to it at {provider}")
    joined_names = [names[p].name for p in joined]
    left_names = [names[p].name for p in left]
    if joined_names or left_names:
        record(db, "project.idp_sync", actor=f"system:{provider}", target_type="user",
               target_id=user.id, details={"user": user.username, "joined": joined_names,
                                           "left": left_names})
    return joined_names, left_names
