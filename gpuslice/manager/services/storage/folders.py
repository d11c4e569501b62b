"""Folders: who may use which (the one rule, ``get_access``), listing, creating, renaming,
deleting (sharing is ``grants.py``).

Access (``access.Access.level``): ``owner`` for a user's own folders and, for admins, shared
folders; ``rw`` / ``ro`` through a grant; ``rw`` for a project's folder to its members; nothing
otherwise, answered exactly like a folder that does not exist (404, same message) so nobody
learns another user's (or another project's) folders exist. Admins get no access to users' own
folders: those hold people's data.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import FINAL
from gpuslice.common.schemas.storage import FolderCreate, FolderPublic, FolderUpdate
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import (
    FolderGrantRow,
    FolderRow,
    ProjectMemberRow,
    ProjectRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpuslice.manager.services.projects.service import get_project, member_of
from gpuslice.manager.services.storage import grants
from gpuslice.manager.services.storage.access import Access
from gpuslice.manager.services.storage.fs import StorageFS

log = logging.getLogger(__name__)
SHARED = "shared"


async def get_access(db: AsyncSession, user: UserRow, folder_id: str) -> Access:
    """The folder if ``user`` may use it; otherwise 404, as for a folder that does not exist."""
    row = await db.get(FolderRow, folder_id)
    level = None if row is None else await _level(db, user, row)
    if row is not None and level is None and await grants.claim_invites(db, user):
        level = await _level(db, user, row)  # shared with their name before they existed
    await db.commit()  # the gate of routes that stream: hold no transaction meanwhile
    if row is None or level is None:
        raise NotFound(f"no folder {folder_id}", field="folder_id")
    return Access(row, level, user.role == Role.ADMIN, user.id)


async def list_folders(db: AsyncSession, user: UserRow) -> list[FolderPublic]:
    """One's own folders, those shared with one, and (admins) every shared folder."""
    if await grants.claim_invites(db, user):
        await db.commit()
    own = (await db.scalars(select(FolderRow).where(FolderRow.owner_id == user.id))).all()
    granted = (await db.execute(
        select(FolderRow, FolderGrantRow.permission)
        .join(FolderGrantRow, FolderGrantRow.folder_id == FolderRow.id)
        .where(FolderGrantRow.user_id == user.id)
    )).all()
    levels: dict[str, tuple[FolderRow, str]] = {r.id: (r, "owner") for r in own}
    for row, permission in granted:
        levels.setdefault(row.id, (row, permission))
    if user.role == Role.ADMIN:
        for row in await db.scalars(select(FolderRow).where(FolderRow.owner_id.is_(None))):
            levels[row.id] = (row, "owner")
    for row in await project_folders(db, user):
        levels.setdefault(row.id, (row, "rw"))
    ordered = sorted(levels.values(), key=lambda item: (item[0].shared, item[0].name))
    admin = user.role == Role.ADMIN
    return [await describe(db, row, level, admin=admin) for row, level in ordered]


async def create_folder(
    db: AsyncSession, fs: StorageFS, user: UserRow, body: FolderCreate
) -> FolderPublic:
    shared = body.shared or body.project is not None
    if shared and user.role != Role.ADMIN:
        raise Forbidden("only admins create shared folders", field="shared")
    if shared and body.name.startswith("."):
        raise InvalidRequest("dot-folders cannot be shared: they belong to one user's "
                             "sessions", field="name", code="dot_folder")
    project = None
    if body.project is not None:  # names are unique per project: its id is the scope
        project = await get_project(db, user, body.project)
    row = FolderRow(scope=project.id if project else SHARED if shared else user.id,
                    name=body.name, owner_id=None if shared else user.id, size=0, files=0,
                    project_id=project.id if project else None)
    db.add(row)
    try:
        await db.flush()
    except IntegrityError:
        await db.rollback()
        raise _exists(body.name, shared) from None
    try:
        await asyncio.to_thread(fs.make_folder, row.storage_path)
    except OSError as exc:
        await db.rollback()
        raise Conflict(f"the storage cannot hold a new folder: {exc.strerror}",
                       code="storage_error") from None
    await db.commit()
    return await describe(db, row, "owner", admin=user.role == Role.ADMIN)


async def rename_folder(db: AsyncSession, access: Access, body: FolderUpdate) -> FolderPublic:
    access.require_owner("rename it")
    row = access.folder
    if body.name.startswith(".") and (
            row.shared or await grants.listing(db, row.id, admin=access.admin)):
        raise InvalidRequest("a shared folder cannot become a dot-folder (dot-folders are "
                             "never shared); revoke its grants first", field="name",
                             code="dot_folder")
    shared = row.shared  # read now: after a rollback the row's attributes are expired
    row.name = body.name
    try:
        await db.commit()
    except IntegrityError:  # the name is taken, or was taken by a rename racing this one
        await db.rollback()
        raise _exists(body.name, shared) from None
    return await describe(db, row, "owner", admin=access.admin)


async def delete_folder(db: AsyncSession, fs: StorageFS, access: Access) -> None:
    """Delete the folder and its files; refused while a session that is not over mounts it."""
    access.require_owner("delete it")
    row = access.folder
    users = await mounted_by(db, row.id)
    if users:
        raise Conflict(_in_use(row.name, users, access), code="folder_in_use")
    path = row.storage_path
    await db.delete(row)
    await db.commit()
    try:
        await asyncio.to_thread(fs.remove_folder, path)
    except OSError as exc:  # the row is gone: the leftover directory is unreachable
        log.warning("folder %s deleted, but removing %s failed: %s", row.id, path, exc)


async def mounted_by(db: AsyncSession, folder_id: str) -> list[tuple[str, str]]:
    """(name, owner id) of each session not over yet (PENDING to TERMINATING) that mounts
    the folder, by name."""
    rows = await db.execute(
        select(SessionRow.name, SessionRow.owner_id, SessionRow.folders)
        .where(SessionRow.status.not_in(list(FINAL)))
    )
    return sorted({(name, owner) for name, owner, folders in rows
                   if any(f.get("folder_id") == folder_id for f in folders or [])})


def _in_use(folder: str, users: list[tuple[str, str]], access: Access) -> str:
    """Why the folder cannot go yet, naming only the sessions the caller may see (their own;
    an admin's, all): others' are counted, as the rest of the API keeps them unnamed."""
    mine = [name for name, owner in users if access.admin or owner == access.viewer_id]
    others = len(users) - len(mine)
    parts = [f"session(s) {', '.join(mine)}"] if mine else []
    if others:
        parts.append("1 session of another user" if others == 1
                     else f"{others} sessions of other users")
    if not others:
        return f"folder {folder} is mounted by {parts[0]}; destroy them first"
    first = "destroy yours, then " if mine else ""
    return (f"folder {folder} is mounted by {' and '.join(parts)}; {first}delete it once "
            "theirs end (ask them, or an admin, to end them: revoking a share does not "
            "unmount a session that already has the folder)")


async def find_user_for(db: AsyncSession, viewer: UserRow, ref: str) -> UserRow:
    """Another user, for an admin; a user may only name themself."""
    if ref in (viewer.username, viewer.id):
        return viewer
    if viewer.role != Role.ADMIN:
        raise Forbidden("only admins see other users' storage", field="user")
    return await find_user(db, ref)


async def find_user(db: AsyncSession, ref: str) -> UserRow:
    user = await db.scalar(select(UserRow).where((UserRow.username == ref) | (UserRow.id == ref)))
    if user is None:
        raise NotFound(f"no user named {ref!r}", field="user")
    return user


async def describe(db: AsyncSession, row: FolderRow, level: str, *, admin: bool) -> FolderPublic:
    owner, project = SHARED, None
    if row.owner_id is not None:
        owner = await db.scalar(select(UserRow.username).where(UserRow.id == row.owner_id)) or "?"
    if row.project_id is not None:
        project = await db.scalar(select(ProjectRow.name).where(ProjectRow.id == row.project_id))
    shared_with = await grants.listing(db, row.id, admin=admin) if level == "owner" else None
    return FolderPublic(
        id=row.id, name=row.name, owner_id=row.owner_id, owner=owner, shared=row.shared,
        project=project, access=level,
        auto_mount=row.name.startswith("."), size=row.size, files=row.files,
        measured_at=row.measured_at, created_at=row.created_at, grants=shared_with,
    )


async def project_folders(db: AsyncSession, user: UserRow) -> list[FolderRow]:
    """The folders of the projects ``user`` is a member of (they mount them read-write)."""
    return list((await db.scalars(select(FolderRow).where(
        FolderRow.project_id.in_(member_of(user))).order_by(FolderRow.name))).all())


async def _level(db: AsyncSession, user: UserRow, row: FolderRow) -> str | None:
    if row.owner_id == user.id or (row.shared and user.role == Role.ADMIN):
        return "owner"
    grant = await db.get(FolderGrantRow, (row.id, user.id))
    if grant is not None:
        return grant.permission
    if row.project_id is not None:
        member = await db.get(ProjectMemberRow, (row.project_id, user.id))
        return "rw" if member is not None else None
    return None


def _exists(name: str, shared: bool) -> Conflict:
    text = f"a shared folder named {name} exists" if shared else (
        f"you already have a folder named {name}")
    return Conflict(text, field="name", code="folder_exists")
