"""Sharing a folder: grants to users, and invitations held for usernames nobody has yet.

Sharing tells a user nothing about who exists: naming a user who exists and one who does not
gets the same answer, and the folder's grants list both alike (by the name given, without
user ids). A share to a username nobody has is held as an invitation (``FolderInviteRow``) and
becomes a grant once a user of that name exists: at their creation (:func:`claim_invites`),
and again whenever they list or open folders (should the two have raced). Admins, who see
every user anyway, name users by username or id and are told when none exists.
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.storage import FolderGrantCreate, FolderGrantPublic, Permission
from gpuslice.common.schemas.users import USERNAME_PATTERN
from gpuslice.manager.db.models import FolderGrantRow, FolderInviteRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.services.storage.access import Access

_USERNAME = re.compile(USERNAME_PATTERN)
_BATCH = 1000  # names per query: within every database's limit on bound parameters


async def share(db: AsyncSession, access: Access, body: FolderGrantCreate) -> FolderGrantPublic:
    """Grant a user read-only or read-write use of the folder (again: change it)."""
    access.require_owner("share it")
    row = access.folder
    if row.name.startswith("."):
        raise InvalidRequest(f"{row.name} is a dot-folder: dot-folders are never shared",
                             code="dot_folder")
    user = await _named(db, body.user, admin=access.admin)
    if user is not None and user.id == row.owner_id:
        raise InvalidRequest(f"{user.username} owns {row.name} already", field="user")
    key: FolderGrantRow | FolderInviteRow | None
    if user is not None:
        key = await db.get(FolderGrantRow, (row.id, user.id))
        if key is None:
            key = FolderGrantRow(folder_id=row.id, user_id=user.id)
            db.add(key)
    else:
        key = await db.get(FolderInviteRow, (row.id, body.user))
        if key is None:
            key = FolderInviteRow(folder_id=row.id, username=body.user)
            db.add(key)
    key.permission = body.permission
    try:
        await db.commit()
    except IntegrityError:  # the same share made by another request at this instant
        await db.rollback()
        raise Conflict(f"{row.name} was shared with {body.user} by another request just now; "
                       "try again", field="user", code="grant_busy") from None
    return FolderGrantPublic(
        user_id=user.id if user is not None and access.admin else None,
        username=user.username if user is not None else body.user,
        permission=Permission(key.permission), created_at=key.created_at)


async def revoke(db: AsyncSession, access: Access, ref: str) -> None:
    """Take a grant (or an invitation) back: running sessions keep their mount until they
    stop. Not shared with ``ref`` is one answer, whether or not such a user exists."""
    access.require_owner("change who it is shared with")
    folder_id = access.folder.id
    user = await _named(db, ref, admin=access.admin, strict=False)
    grant = None if user is None else await db.get(FolderGrantRow, (folder_id, user.id))
    invite = await db.get(FolderInviteRow, (folder_id, user.username if user else ref))
    if grant is None and invite is None:
        raise NotFound(f"{access.folder.name} is not shared with {ref}", field="user")
    for held in (grant, invite):
        if held is not None:
            await db.delete(held)
    await db.commit()


async def listing(db: AsyncSession, folder_id: str, *, admin: bool) -> list[FolderGrantPublic]:
    """Who the folder is shared with, invitations alike, by username (ids: admins only)."""
    grants = (await db.execute(
        select(FolderGrantRow, UserRow.username)
        .join(UserRow, UserRow.id == FolderGrantRow.user_id)
        .where(FolderGrantRow.folder_id == folder_id)
    )).all()
    invites = await db.scalars(select(FolderInviteRow).where(
        FolderInviteRow.folder_id == folder_id))
    out = [FolderGrantPublic(user_id=g.user_id if admin else None, username=name,
                             permission=Permission(g.permission), created_at=g.created_at)
           for g, name in grants]
    out += [FolderGrantPublic(user_id=None, username=i.username,
                              permission=Permission(i.permission), created_at=i.created_at)
            for i in invites]
    return sorted(out, key=lambda g: g.username)


async def claim_invites(db: AsyncSession, *users: UserRow) -> bool:
    """Turn the invitations held for these users' names into grants (flushed, not
    committed); whether there were any. The users' rows must be flushed already."""
    by_name = {u.username: u for u in users}
    names, claimed = list(by_name), False
    for start in range(0, len(names), _BATCH):
        invites = (await db.scalars(select(FolderInviteRow).where(
            FolderInviteRow.username.in_(names[start:start + _BATCH])))).all()
        for invite in invites:
            user = by_name[invite.username]
            if await db.get(FolderGrantRow, (invite.folder_id, user.id)) is None:
                db.add(FolderGrantRow(folder_id=invite.folder_id, user_id=user.id,
                                      permission=invite.permission,
                                      created_at=invite.created_at))
            await db.delete(invite)
            claimed = True
    if claimed:
        await db.flush()
    return claimed


async def _named(
    db: AsyncSession, ref: str, *, admin: bool, strict: bool = True
) -> UserRow | None:
    """The user ``ref`` names, or ``None``. Admins: by username or id, 404 when none (with
    ``strict``). Users: by username only, and ``None`` tells them nothing."""
    if admin:
        user = await db.scalar(
            select(UserRow).where((UserRow.username == ref) | (UserRow.id == ref)))
        if user is None and strict:
            raise NotFound(f"no user named {ref!r}", field="user")
        return user
    if strict and not _USERNAME.match(ref):
        raise InvalidRequest(f"{ref!r} is not a username: name the user by their username "
                             "(lower case letters, digits, _ . -, not starting with a digit)",
                             field="user")
    return await db.scalar(select(UserRow).where(UserRow.username == ref))
