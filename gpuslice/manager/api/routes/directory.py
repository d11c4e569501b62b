from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpuslice.common.schemas.ldap import LdapTestResult
from gpuslice.manager.api.deps import AdminUser, DbDep, SettingsDep, ThrottleDep
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.identity import ldap

router = APIRouter(prefix="/ldap", tags=["auth"])


@router.get("/test")
async def test_directory(
    db: DbDep, settings: SettingsDep, throttle: ThrottleDep, _admin: AdminUser,
    user: Annotated[str | None, Query(max_length=64)] = None,
) -> LdapTestResult:
    """Search the directory as gpuslice's service account (503 `directory_unavailable` when it
    does not answer or refuses it); with `user`, their entry, groups and what gpuslice would do
    with them: allowed, admin, projects (admins only; never binds as the user)."""
    if not settings.auth.ldap.url:
        raise InvalidRequest("no directory is configured: set auth.ldap.url (see "
                             "docs/operations.md, Sign in with an LDAP directory)",
                             code="ldap_off")
    return await ldap.test_user(db, settings.auth.ldap, user, throttle.checks.run)
