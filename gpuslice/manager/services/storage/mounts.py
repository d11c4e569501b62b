"""Which folders a session mounts, and how, from its creation to its node's assignment.

At creation (``resolve``) the folders asked for (``NAME``, ``NAME:ro``, ``NAME:rw``, or an id)
are found among those the owner may use (their own first, then those shared with them) and
recorded on the session with the owner's dot-folders; a folder shared read-only can only be
mounted read-only. Every assignment (``assignment_mounts``) checks again: a folder deleted or
a grant revoked since is left out, a grant lowered to read-only makes the mount read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import FolderMount
from gpuslice.common.schemas.storage import Permission, parse_folder_request
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import (
    FolderGrantRow,
    FolderRow,
    ProjectMemberRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.storage import grants
from gpuslice.manager.services.storage.folders import project_folders


async def resolve(
    db: AsyncSession, user: UserRow, requests: Sequence[str]
) -> list[dict[str, Any]]:
    """The session's mounts ``[{folder_id, name, read_only}]``: those asked, then dot-folders."""
    if not requests:  # (most creates) only the owner's dot-folders: one short read
        dot = await db.scalars(
            select(FolderRow)
            .where(FolderRow.owner_id == user.id, FolderRow.name.startswith("."))
            .order_by(FolderRow.name)
        )
        return [{"folder_id": row.id, "name": row.name, "read_only": False} for row in dot]
    usable = await _usable(db, user)
    mounts: list[dict[str, Any]] = []
    for request in requests:
        ref, mode = parse_folder_request(request)
        row, level = _find(usable, ref)
        if level == "ro" and mode is Permission.RW:
            raise InvalidRequest(f"folder {ref} is shared with you read-only: mount it as "
                                 f"{ref}:ro", field="folders", code="read_only")
        read_only = mode is Permission.RO or level == "ro"
        mounts.append({"folder_id": row.id, "name": row.name, "read_only": read_only})
    asked = {m["folder_id"] for m in mounts}
    for row, level in usable:
        if level == "owner" and row.owner_id == user.id and row.name.startswith("."):
            if row.id not in asked:
                mounts.append({"folder_id": row.id, "name": row.name, "read_only": False})
    names = [m["name"] for m in mounts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidRequest(f"two folders would be mounted at /home/work/{twice[0]}: ask for "
                             "each name once", field="folders", code="folder_twice")
    return mounts


async def assignment_mounts(
    db: AsyncSession, rows: Sequence[SessionRow]
) -> dict[str, list[FolderMount]]:
    """Each session's mounts as its agent gets them, checked against folders and grants now."""
    wanted = {m["folder_id"] for row in rows for m in row.folders or []}
    if not wanted:
        return {}
    folders = {f.id: f for f in await db.scalars(
        select(FolderRow).where(FolderRow.id.in_(wanted)))}
    grants = {(g.folder_id, g.user_id): g.permission for g in await db.scalars(
        select(FolderGrantRow).where(FolderGrantRow.folder_id.in_(wanted)))}
    # members of the projects whose folders these are: they mount them read-write
    members = {(m.project_id, m.user_id) for m in await db.scalars(
        select(ProjectMemberRow).where(ProjectMemberRow.project_id.in_(
            {f.project_id for f in folders.values() if f.project_id is not None})))}
    admins = set(await db.scalars(select(UserRow.id).where(
        UserRow.id.in_({row.owner_id for row in rows}), UserRow.role == Role.ADMIN)))
    out: dict[str, list[FolderMount]] = {}
    for row in rows:
        mounts = []
        for mount in row.folders or []:
            folder = folders.get(mount["folder_id"])
            if folder is None:
                continue
            grant = grants.get((folder.id, row.owner_id))
            managed = folder.owner_id == row.owner_id or (
                folder.shared and row.owner_id in admins) or (
                (folder.project_id, row.owner_id) in members)
            if not managed and grant is None:
                continue  # the grant was revoked, or the owner left the project
            read_only = bool(mount["read_only"]) or grant == "ro"
            mounts.append(FolderMount(path=folder.storage_path, name=mount["name"],
                                      read_only=read_only))
        out[row.id] = mounts
    return out


async def _usable(db: AsyncSession, user: UserRow) -> list[tuple[FolderRow, str]]:
    """Folders the user may mount: their own (admins: shared ones too), then those granted to
    them (by name order)."""
    await grants.claim_invites(db, user)  # shared with their name before they existed
    mine = FolderRow.owner_id == user.id
    if user.role == Role.ADMIN:
        mine = mine | FolderRow.owner_id.is_(None)
    own = (await db.scalars(select(FolderRow).where(mine).order_by(FolderRow.name))).all()
    granted = (await db.execute(
        select(FolderRow, FolderGrantRow.permission)
        .join(FolderGrantRow, FolderGrantRow.folder_id == FolderRow.id)
        .where(FolderGrantRow.user_id == user.id)
        .order_by(FolderRow.name)
    )).all()
    seen = {r.id for r in own} | {r.id for r, _ in granted}
    teams = [(r, "rw") for r in await project_folders(db, user) if r.id not in seen]
    return [(r, "owner") for r in own] + [(r, p) for r, p in granted] + teams


def _find(usable: list[tuple[FolderRow, str]], ref: str) -> tuple[FolderRow, str]:
    for row, level in usable:
        if row.id == ref:
            return row, level
    own = [(r, lvl) for r, lvl in usable if r.name == ref and lvl == "owner"]
    if own:
        return own[0]
    shared = [(r, lvl) for r, lvl in usable if r.name == ref]
    if len(shared) > 1:
        raise InvalidRequest(f"several folders named {ref} are shared with you: give the id",
                             field="folders", code="ambiguous_folder")
    if not shared:
        raise InvalidRequest(f"no folder named {ref} (`gpuslice folder list` shows yours)",
                             field="folders", code="unknown_folder")
    return shared[0]
