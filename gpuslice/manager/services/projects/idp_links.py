"""Which groups at an identity provider make people members of a project (admins set them;
each sign-in and re-check syncs the ``idp`` memberships from them, ``groups.sync_projects``)."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.projects import IdpGroups
from gpuslice.manager.db.models import ProjectIdpGroupRow, ProjectRow, UserRow
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.audit import context as audit
from gpuslice.manager.services.projects.service import get_project

PROVIDERS = ("ldap", "oidc")


async def links_of(db: AsyncSession, project_id: str) -> list[IdpGroups]:
    """The project's links, one entry per provider that has any."""
    rows = (await db.execute(
        select(ProjectIdpGroupRow.provider, ProjectIdpGroupRow.group_value)
        .where(ProjectIdpGroupRow.project_id == project_id)
        .order_by(ProjectIdpGroupRow.provider, ProjectIdpGroupRow.group_value))).all()
    found: dict[str, list[str]] = {}
    for provider, group in rows:
        found.setdefault(provider, []).append(group)
    return [IdpGroups.model_validate({"provider": p, "groups": g}) for p, g in found.items()]


async def get_links(db: AsyncSession, viewer: UserRow, name: str) -> list[IdpGroups]:
    return await links_of(db, (await get_project(db, viewer, name)).id)


async def set_links(db: AsyncSession, viewer: UserRow, name: str, body: IdpGroups
                    ) -> list[IdpGroups]:
    """Replace the project's groups at ``body.provider``. Memberships follow at each member's
    next sign-in or re-check (nobody is added or removed now)."""
    project = await get_project(db, viewer, name)
    if project.personal_of is not None:
        raise InvalidRequest(f"{project.name} is a personal project: only its user launches "
                             "in it, no group can be linked", field="project",
                             code="personal_project")
    before = await replace(db, project, body.provider, body.groups)
    audit.note(project=project.name, provider=body.provider, before=before,
               after=sorted(set(body.groups)))
    await db.commit()
    return await links_of(db, project.id)


async def replace(db: AsyncSession, project: ProjectRow, provider: str,
                  groups: list[str]) -> list[str]:
    """Make ``groups`` the project's links at ``provider`` (in the caller's transaction); the
    groups it had."""
    wanted = list(dict.fromkeys(groups))
    before = list(await db.scalars(select(ProjectIdpGroupRow.group_value).where(
        ProjectIdpGroupRow.project_id == project.id, ProjectIdpGroupRow.provider == provider)))
    await db.execute(delete(ProjectIdpGroupRow).where(
        ProjectIdpGroupRow.project_id == project.id, ProjectIdpGroupRow.provider == provider))
    db.add_all(ProjectIdpGroupRow(project_id=project.id, provider=provider, group_value=g)
               for g in wanted)
    return sorted(before)
