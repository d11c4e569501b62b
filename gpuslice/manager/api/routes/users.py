from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.users import UserCreate, UserPublic, UserUpdate
from gpuslice.manager.api.deps import AdminUser, DbDep
from gpuslice.manager.services import users

router = APIRouter(prefix="/users", tags=["users"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_user(body: UserCreate, db: DbDep, _admin: AdminUser) -> UserPublic:
    """Create a user (admins only)."""
    return await users.create_user(db, body)


@router.get("")
async def list_users(db: DbDep, _admin: AdminUser) -> list[UserPublic]:
    """All users (admins only)."""
    return await users.list_users(db)


@router.get("/{user_id}")
async def get_user(user_id: str, db: DbDep, _admin: AdminUser) -> UserPublic:
    """One user (admins only)."""
    return users.public(await users.get_user(db, user_id))


@router.patch("/{user_id}")
async def update_user(user_id: str, body: UserUpdate, db: DbDep, _admin: AdminUser) -> UserPublic:
    """Change a user's password, role, active flag or policy (admins only). A new password
    ends the user's logins (API tokens too, unless `keep_api_tokens`); the last active admin
    cannot be demoted or disabled (409 `last_admin`)."""
    return await users.update_user(db, user_id, body)
