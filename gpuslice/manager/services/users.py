"""Users (admins manage them) and the first admin created at first start."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.users import Role, UserCreate, UserPublic, UserUpdate
from gpuslice.manager.db.models import ResourcePolicyRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.security import hash_password, new_password
from gpuslice.manager.services import presets, priorities
from gpuslice.manager.services.audit import context as audit
from gpuslice.manager.services.auth import end_tokens, managed_elsewhere
from gpuslice.manager.services.projects.service import personal_project
from gpuslice.manager.services.storage import grants

log = logging.getLogger(__name__)
CREDENTIALS_FILE = "admin-credentials"


async def create_user(db: AsyncSession, body: UserCreate) -> UserPublic:
    if body.policy_id is not None:
        await _require_policy(db, body.policy_id)
    row = UserRow(
        username=body.username, password_hash=await hash_password(body.password),
        role=body.role, is_active=True, policy_id=body.policy_id,
    )
    db.add(row)
    try:
        await db.flush()
        await grants.claim_invites(db, row)  # folders shared with this name before
        await personal_project(db, row)
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"user {body.username!r} already exists", field="username") from None
    return public(row)


async def list_users(db: AsyncSession) -> list[UserPublic]:
    return [public(u) for u in await db.scalars(select(UserRow).order_by(UserRow.username))]


async def get_user(db: AsyncSession, user_id: str) -> UserRow:
    row = await db.get(UserRow, user_id)
    if row is None:
        raise NotFound(f"no user {user_id}")
    return row


async def update_user(db: AsyncSession, user_id: str, body: UserUpdate) -> UserPublic:
    """Change a user; a new password ends their logins (and API tokens, unless kept). The last
    active admin can be neither demoted nor disabled."""
    new_hash = await hash_password(body.password) if body.password is not None else None
    if body.role == Role.USER or body.is_active is False:
        # Admin rows are locked first (PostgreSQL), so two admins demoting each other at once
        # cannot both succeed; on SQLite the write below serialises them.
        await db.execute(select(UserRow.id).where(UserRow.role == Role.ADMIN).with_for_update())
    row = await get_user(db, user_id)
    before = {"role": str(row.role), "is_active": row.is_active, "policy_id": row.policy_id}
    if new_hash is not None:
        managed_elsewhere(row)
        row.password_hash = new_hash
        await end_tokens(db, row.id, keep_api_tokens=body.keep_api_tokens)
    if body.role is not None:
        row.role = body.role
    if body.is_active is not None:
        row.is_active = body.is_active
        # an admin's disable outlives a directory's re-check (which enables only its own)
        row.disabled_reason = None if body.is_active else "admin"
    if body.clear_policy:
        row.policy_id = None
    elif body.policy_id is not None:
        await _require_policy(db, body.policy_id)
        row.policy_id = body.policy_id
    await db.flush()
    admins = await db.scalar(select(func.count()).select_from(UserRow).where(
        UserRow.role == Role.ADMIN, UserRow.is_active.is_(True)))
    if not admins:
        username = row.username
        await db.rollback()
        raise Conflict(
            f"{username} is the last active admin: make another admin first",
            field="role" if body.role == Role.USER else "is_active", code="last_admin",
        )
    after = {"role": str(row.role), "is_active": row.is_active, "policy_id": row.policy_id}
    audit.note(changed={k: [before[k], v] for k, v in after.items() if before[k] != v},
               password_reset=new_hash is not None)  # before/after in the audit row
    await db.commit()
    return public(row)


def public(row: UserRow) -> UserPublic:
    return UserPublic(
        id=row.id, username=row.username, role=Role(row.role), is_active=row.is_active,
        policy_id=row.policy_id, created_at=row.created_at, source=row.source,
        disabled_reason=row.disabled_reason, standing_until=row.standing_until,
    )


async def ensure_admin(
    sessionmaker: async_sessionmaker[AsyncSession], username: str, data_dir: Path
) -> Path | None:
    """On first start (no users), create an admin; its password goes to a 0600 file, not the log.
    The platform's default resource preset and priority class are made with it (one transaction).

    Returns the credentials file when an admin was created now.
    """
    async with sessionmaker() as db:
        if await db.scalar(select(func.count()).select_from(UserRow)):
            return None
        password = new_password()
        db.add(
            UserRow(
                username=username, password_hash=await hash_password(password),
                role=Role.ADMIN, is_active=True,
            )
        )
        presets.add_default(db)
        priorities.add_default(db)
        try:
            await db.commit()
        except IntegrityError:  # another manager created it first
            return None
    path = data_dir / CREDENTIALS_FILE
    write_private(path, f"username: {username}\npassword: {password}\n")
    log.warning("created admin user %r; its password is in %s (mode 0600)", username, path)
    return path


def write_private(path: Path, text: str) -> None:
    """``text`` in a file only its owner may read (the admin credentials)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the file may have existed with wider permissions
        os.write(fd, text.encode())
    finally:
        os.close(fd)


async def _require_policy(db: AsyncSession, policy_id: str) -> None:
    if await db.get(ResourcePolicyRow, policy_id) is None:
        raise InvalidRequest(f"no resource policy {policy_id}", field="policy_id")
