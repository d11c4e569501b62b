"""An account's identities at providers (admins): link after an identity conflict, unlink."""

from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.identity import IdentityLink, IdentityPublic
from gpuslice.manager.api.deps import AdminUser, DbDep
from gpuslice.manager.services import users
from gpuslice.manager.services.identity import admin as identities

router = APIRouter(prefix="/users/{user_id}/identities", tags=["users"])


@router.get("")
async def list_identities(user_id: str, db: DbDep, _admin: AdminUser) -> list[IdentityPublic]:
    """The user's identities at OIDC and LDAP providers (admins only)."""
    return await identities.identities_of(db, await users.get_user(db, user_id))


@router.post("", status_code=status.HTTP_201_CREATED)
async def link_identity(user_id: str, body: IdentityLink, db: DbDep,
                        _admin: AdminUser) -> IdentityPublic:
    """Link the user to a provider's user (admins only): their next sign-in there is this
    account. 409 when the account or the provider's user is linked already."""
    return await identities.link(db, await users.get_user(db, user_id), body)


@router.delete("/{identity_id}", status_code=status.HTTP_204_NO_CONTENT)
async def unlink_identity(user_id: str, identity_id: str, db: DbDep, _admin: AdminUser) -> None:
    """Unlink one of the user's identities (admins only)."""
    await identities.unlink(db, await users.get_user(db, user_id), identity_id)
