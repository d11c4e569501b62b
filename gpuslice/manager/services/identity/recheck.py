"""The directory's re-check (a manager loop, every ``auth.ldap.recheck_interval``): each
directory user with a live token, or disabled by the directory, looked up again by subject.

Gone, locked or filtered out ⇒ disabled (``disabled_reason = "directory: ..."``), every token
ended, audit ``user.deprovision``; present ⇒ their role and projects follow their groups, and
one the directory disabled is enabled again (an admin's disable stays). A directory that does
not answer changes nothing: tokens are kept, one warning, the next pass tries again.
"""

from __future__ import annotations

import logging

from sqlalchemy import Select, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, UserIdentityRow, UserRow
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.auth import end_tokens
from gpuslice.manager.services.identity.accounts import allowed, apply_groups
from gpuslice.manager.services.identity.directory import Directory, DirectoryDown, Entry
from gpuslice.manager.services.identity.ldap import Runner, enable_if_back, profile_of
from gpuslice.manager.settings import LdapSettings

log = logging.getLogger(__name__)
DIRECTORY = "directory: "


async def recheck(sessionmaker: async_sessionmaker[AsyncSession], settings: LdapSettings,
                  run: Runner) -> int:
    """One pass; the number of users checked (it stops at a directory that does not
    answer)."""
    async with sessionmaker() as db:
        rows = (await db.execute(_due())).tuples().all()
    directory = Directory(settings)
    for user_id, identity_id, subject in rows:
        try:
            entry = await run(directory.check, subject)
            groups = await run(directory.groups_of, entry) if entry is not None else ()
        except DirectoryDown as err:
            log.warning("LDAP re-check: %s; signed-in users keep their tokens, next try in "
                        "%.0f s", err.message, settings.recheck_interval)
            return 0
        async with sessionmaker() as db:
            await _apply(db, user_id, identity_id, entry, groups, settings)
            await db.commit()
    return len(rows)


def _due() -> Select[tuple[str, str, str]]:
    live = exists().where(ApiTokenRow.user_id == UserRow.id, ApiTokenRow.revoked_at.is_(None),
                          or_(ApiTokenRow.expires_at.is_(None),
                              ApiTokenRow.expires_at > utcnow()))
    return (select(UserRow.id, UserIdentityRow.id, UserIdentityRow.subject)
            .join(UserIdentityRow, UserIdentityRow.user_id == UserRow.id)
            .where(UserIdentityRow.provider == "ldap",
                   or_(UserRow.is_active.is_(True) & live,
                       UserRow.disabled_reason.startswith(DIRECTORY)))
            .order_by(UserIdentityRow.checked_at))


async def _apply(db: AsyncSession, user_id: str, identity_id: str, entry: Entry | None,
                 groups: tuple[str, ...] | None, settings: LdapSettings) -> None:
    user = await db.get(UserRow, user_id)
    identity = await db.get(UserIdentityRow, identity_id)
    if user is None or identity is None:  # deleted meanwhile
        return
    identity.checked_at = utcnow()
    profile = profile_of(entry, user.username, groups, settings) if entry else None
    reason = ("not found" if profile is None or entry is None
              else "disabled" if entry.locked
              # groups not known (more than gpuslice takes): no change for them
              else None if groups is None or allowed(profile, settings)
              else "not in allowed groups")
    if reason is not None:
        if user.is_active:
            user.is_active, user.disabled_reason = False, DIRECTORY + reason
            await end_tokens(db, user.id, keep_api_tokens=False)
            record(db, "user.deprovision", actor="system:ldap", target_type="user",
                   target_id=user.id, details={"user": user.username, "reason": reason})
        return
    assert profile is not None
    await enable_if_back(db, profile, settings)
    if user.is_active:
        await apply_groups(db, user, identity, profile, settings)
