"""Sign-in with a directory password, and what the directory says of a user (``admin ldap
test``). The directory's calls block: they run on the password-check threads (``Runner``)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.ldap import LdapTestResult
from gpuslice.common.schemas.users import USERNAME_PATTERN
from gpuslice.manager.db.models import ProjectIdpGroupRow, ProjectRow, UserIdentityRow, UserRow
from gpuslice.manager.errors import InvalidRequest, Unauthorized
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.auth import DirectorySignIn
from gpuslice.manager.services.identity.accounts import allowed, sign_in
from gpuslice.manager.services.identity.directory import Directory, Entry
from gpuslice.manager.services.identity.profile import Profile, SignInRefused, text_of
from gpuslice.manager.settings import LdapSettings

Runner = Callable[..., Awaitable[Any]]
_USERNAME = re.compile(USERNAME_PATTERN)
WRONG = "wrong username or password"


async def ldap_sign_in(db: AsyncSession, username: str, password: str,
                       settings: LdapSettings, run: Runner) -> UserRow:
    """The user ``username`` is at the directory, once their password binds (committed); a
    one-line refusal otherwise (``DirectoryDown``: 503, the directory did not answer)."""
    if not password or not _USERNAME.fullmatch(username):
        # an empty password would be an anonymous bind that "succeeds": never sent
        raise Unauthorized(WRONG, code="bad_credentials")
    directory = Directory(settings)
    entry = await run(directory.find_user, username)
    if entry is None:
        raise Unauthorized(WRONG, code="bad_credentials")
    if not await run(directory.bind, entry.dn, password):
        if entry.locked:
            raise SignInRefused("your directory account is locked or disabled: ask your "
                                "directory's administrator to unlock it", code="account_locked")
        raise Unauthorized(WRONG, code="bad_credentials")
    profile = profile_of(entry, username, await run(directory.groups_of, entry), settings)
    await enable_if_back(db, profile, settings)
    return await sign_in(db, profile, settings)


def signer(settings: LdapSettings, run: Runner) -> DirectorySignIn | None:
    """The directory's sign-in for the password login (None while ``auth.ldap`` is off)."""
    if not settings.url:
        return None
    return lambda db, username, password: ldap_sign_in(db, username, password, settings, run)


def profile_of(entry: Entry, username: str, groups: tuple[str, ...] | None,
               settings: LdapSettings) -> Profile:
    """The profile of a directory entry (named as the user signs in). The directory's
    administrators set its e-mail addresses: taken as verified."""
    email = text_of(entry.first(settings.email_attribute), 320)
    return Profile(provider="ldap", subject=entry.subject, username=username,
                   display_name=text_of(entry.first(settings.name_attribute), 128),
                   email=email, email_verified=bool(email), groups=groups)


async def enable_if_back(db: AsyncSession, profile: Profile, settings: LdapSettings) -> bool:
    """A user the directory disabled, found again and allowed, is enabled again (an admin's
    disable stays). In the caller's transaction; whether they were."""
    user = await db.scalar(select(UserRow).join(
        UserIdentityRow, UserIdentityRow.user_id == UserRow.id).where(
        UserIdentityRow.provider == "ldap", UserIdentityRow.subject == profile.subject))
    if (user is None or user.is_active or not allowed(profile, settings)
            or not (user.disabled_reason or "").startswith("directory:")):
        return False
    record(db, "user.reprovision", actor="system:ldap", target_type="user", target_id=user.id,
           details={"user": user.username, "was": user.disabled_reason})
    user.is_active, user.disabled_reason = True, None
    return True


async def test_user(db: AsyncSession, settings: LdapSettings, username: str | None,
                    run: Runner) -> LdapTestResult:
    """Bind as the service account (a search), and with ``username``: their entry, groups and
    what gpuslice would do with them. Never binds as the user."""
    directory = Directory(settings)
    if username is None:
        await run(directory.check, "gpuslice-connection-test")
        return LdapTestResult(url=settings.url)
    if not _USERNAME.fullmatch(username):
        raise InvalidRequest(f"{username!r} is not a gpuslice user name (a-z, 0-9, . _ -, "
                             "starting with a letter or _)", field="user")
    entry = await run(directory.find_user, username)
    if entry is None:
        return LdapTestResult(url=settings.url, user=username, found=False)
    found = await run(directory.groups_of, entry)
    groups = found or ()  # more than gpuslice takes: shown as none (a sign-in changes nothing)
    linked = await db.execute(
        select(ProjectRow.name).join(ProjectIdpGroupRow,
                                     ProjectIdpGroupRow.project_id == ProjectRow.id)
        .where(ProjectIdpGroupRow.provider == "ldap",
               ProjectIdpGroupRow.group_value.in_(groups)).distinct())
    profile = profile_of(entry, username, found, settings)
    admin = bool(set(groups) & set(settings.admin_groups)) if settings.admin_groups else None
    return LdapTestResult(
        url=settings.url, user=username, found=True, dn=entry.dn, subject=entry.subject,
        groups=list(groups), locked=entry.locked, allowed=allowed(profile, settings),
        admin=admin, projects=sorted(linked.scalars()))
