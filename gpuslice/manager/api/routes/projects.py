from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.nodes import NodePublic
from gpuslice.common.schemas.projects import (
    GroupPublic,
    GroupSetRequest,
    IdpGroups,
    ProjectCreate,
    ProjectMember,
    ProjectPublic,
    ProjectRename,
    ProjectUpdate,
)
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep, HubDep
from gpuslice.manager.services.nodes import groups
from gpuslice.manager.services.projects import admin as projects_admin
from gpuslice.manager.services.projects import idp_links as links
from gpuslice.manager.services.projects import service

router = APIRouter(tags=["projects"])


@router.post("/projects", status_code=status.HTTP_201_CREATED)
async def create_project(body: ProjectCreate, db: DbDep, _admin: AdminUser) -> ProjectPublic:
    """Create a project with its quotas and resource groups (admins only)."""
    return await service.create_project(db, body)


@router.get("/projects")
async def list_projects(db: DbDep, user: CurrentUser) -> list[ProjectPublic]:
    """The projects you may launch in (admins: every project but others' personal ones)."""
    return await service.list_projects(db, user)


@router.get("/projects/{name}")
async def get_project(name: str, db: DbDep, user: CurrentUser) -> ProjectPublic:
    """One project you may launch in (admins: any), by name or id."""
    return await service.public(db, await service.get_project(db, user, name))


@router.put("/projects/{name}")
async def update_project(
    name: str, body: ProjectUpdate, db: DbDep, admin: AdminUser
) -> ProjectPublic:
    """Replace a project's quotas and groups; what runs keeps running (admins only)."""
    return await service.update_project(db, admin, name, body)


@router.post("/projects/{name}/rename")
async def rename_project(
    name: str, body: ProjectRename, db: DbDep, admin: AdminUser
) -> ProjectPublic:
    """Give a project another name; its members, quotas, sessions, folders and usage stay
    with it (admins only; personal projects cannot be renamed)."""
    return await projects_admin.rename_project(db, admin, name, body.name)


@router.delete("/projects/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_project(name: str, db: DbDep, admin: AdminUser) -> None:
    """Delete a project no unended session, folder or run holds (409 naming what does;
    admins only; personal projects cannot be deleted)."""
    await projects_admin.delete_project(db, admin, name)


@router.post("/projects/{name}/members")
async def add_member(
    name: str, body: ProjectMember, db: DbDep, admin: AdminUser
) -> ProjectPublic:
    """Let a user launch in the project and use its folders (admins only)."""
    return await service.add_member(db, admin, name, body.username)


@router.delete("/projects/{name}/members/{username}")
async def remove_member(name: str, username: str, db: DbDep, admin: AdminUser) -> ProjectPublic:
    """Take a user out of the project: their queued sessions in it are cancelled, running ones
    keep running (admins only)."""
    return await service.remove_member(db, admin, name, username)


@router.get("/projects/{name}/idp-groups")
async def get_idp_groups(name: str, db: DbDep, admin: AdminUser) -> list[IdpGroups]:
    """The groups at each identity provider whose members are the project's members (admins
    only)."""
    return await links.get_links(db, admin, name)


@router.put("/projects/{name}/idp-groups")
async def set_idp_groups(
    name: str, body: IdpGroups, db: DbDep, admin: AdminUser
) -> list[IdpGroups]:
    """Replace the project's groups at one provider (`ldap` or `oidc`); members join or leave
    at their next sign-in or re-check, manual members stay (admins only)."""
    return await links.set_links(db, admin, name, body)


@router.get("/groups")
async def list_groups(db: DbDep, _user: CurrentUser) -> list[GroupPublic]:
    """Resource groups of the alive nodes, with their free capacity."""
    return await groups.list_groups(db)


@router.put("/nodes/{node}/group")
async def set_node_group(
    node: str, body: GroupSetRequest, db: DbDep, hub: HubDep, _admin: AdminUser
) -> NodePublic:
    """Move a node to another resource group (admins only)."""
    return await groups.set_group(db, hub, node, body.group)
