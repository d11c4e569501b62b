"""A signed-in profile to a gpuslice user: linked by (provider, subject), provisioned at the
first sign-in, its role and projects following the provider's groups."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import UserIdentityRow, UserRow
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.identity.groups import sync_projects
from gpuslice.manager.services.identity.profile import Profile, SignInRefused
from gpuslice.manager.services.projects.service import personal_project
from gpuslice.manager.services.storage import grants
from gpuslice.manager.settings import IdentityMapping

__all__ = ["SignInRefused", "allowed", "apply_groups", "no_password", "sign_in"]


def no_password(provider: str) -> str:
    """What a provider's user has for a password hash: a value no password matches."""
    return f"!{provider}"


def allowed(profile: Profile, mapping: IdentityMapping) -> bool:
    """Whether the mapping lets this profile use gpuslice."""
    return mapping.allow_all or bool(set(profile.groups or ()) & set(mapping.allowed_groups))


async def sign_in(db: AsyncSession, profile: Profile, mapping: IdentityMapping) -> UserRow:
    """The user ``profile`` signs in as (committed), or :class:`SignInRefused` with the line to
    show. Writes the identity's groups, the role and project memberships they give."""
    if not allowed(profile, mapping):
        wanted = ", ".join(mapping.allowed_groups[:3])
        raise SignInRefused("you are not in a group allowed to use gpuslice"
                            + (f" (ask to join {wanted})" if wanted else ""),
                            code="not_allowed")
    identity = await db.scalar(select(UserIdentityRow).where(
        UserIdentityRow.provider == profile.provider,
        UserIdentityRow.subject == profile.subject))
    if identity is None:
        user, identity = await _first_sign_in(db, profile, mapping)
    else:
        user = await db.get_one(UserRow, identity.user_id)
        if identity.claimed_username != profile.username:
            record(db, "user.identity_changed", actor=f"system:{profile.provider}",
                   target_type="user", target_id=user.id,
                   details={"user": user.username, "claimed": profile.username})
            identity.claimed_username = profile.username
    if not user.is_active:
        waits = user.disabled_reason == "provision: inactive"
        await db.commit()  # an account made waiting stays, for an admin to enable
        raise SignInRefused(
            "your account waits for an administrator to enable it" if waits
            else "your gpuslice account is disabled", code="account_inactive")
    now = utcnow()
    identity.last_login_at = identity.checked_at = now
    user.last_login_at = now
    user.display_name = profile.display_name or user.display_name
    user.email, user.email_verified = profile.email, profile.email_verified
    await apply_groups(db, user, identity, profile, mapping)
    await db.commit()
    return user


async def apply_groups(db: AsyncSession, user: UserRow, identity: UserIdentityRow,
                       profile: Profile, mapping: IdentityMapping) -> None:
    """The role and project memberships ``profile``'s groups give (at sign-in and at each
    re-check); nothing changes where the groups are not known."""
    if profile.groups is None:
        return
    identity.groups = list(profile.groups)
    if mapping.admin_groups:
        admin = bool(set(profile.groups) & set(mapping.admin_groups))
        role = Role.ADMIN if admin else Role.USER
        if Role(user.role) != role and (admin or await _other_admins(db, user)):
            record(db, "user.role_synced", actor=f"system:{profile.provider}",
                   target_type="user", target_id=user.id,
                   details={"user": user.username, "role": [str(user.role), str(role)]})
            user.role = role
    await sync_projects(db, user, profile.provider, profile.groups)


async def _first_sign_in(db: AsyncSession, profile: Profile, mapping: IdentityMapping
                         ) -> tuple[UserRow, UserIdentityRow]:
    taken = await db.scalar(select(UserRow).where(UserRow.username == profile.username))
    if taken is not None:
        linked = await db.scalar(select(func.count()).select_from(UserIdentityRow).where(
            UserIdentityRow.user_id == taken.id))
        # by-username links a user's account, never an admin's: a provider's user of the
        # same name must not become the break-glass admin (an admin links it by hand)
        if mapping.link_existing != "by-username" or linked or Role(taken.role) == Role.ADMIN:
            raise SignInRefused(
                f"an account named {profile.username} already exists and is not linked to "
                "your sign-in; an administrator can link it with `gpuslice admin user link "
                f"{profile.username} --provider {profile.provider} --subject "
                f"{profile.subject}`", code="identity_conflict")
        identity = _identity(taken, profile)
        db.add(identity)
        record(db, "user.link", actor=f"system:{profile.provider}", target_type="user",
               target_id=taken.id, details={"user": taken.username, "via": "by-username",
                                            "provider": profile.provider})
        await _flush_or_conflict(db, profile)
        return taken, identity
    if mapping.provision == "existing-only":
        raise SignInRefused("you have no gpuslice account yet: ask an administrator to create "
                            "it", code="no_account")
    inactive = mapping.provision == "inactive"
    user = UserRow(username=profile.username, password_hash=no_password(profile.provider),
                   role=Role.USER, is_active=not inactive, source=profile.provider,
                   disabled_reason="provision: inactive" if inactive else None)
    db.add(user)
    await _flush_or_conflict(db, profile)
    identity = _identity(user, profile)
    db.add(identity)
    await _flush_or_conflict(db, profile)
    await grants.claim_invites(db, user)  # folders shared with this name before
    await personal_project(db, user)
    record(db, "user.provision", actor=f"system:{profile.provider}", target_type="user",
           target_id=user.id, details={"user": user.username, "provider": profile.provider,
                                       "active": not inactive})
    return user, identity


def _identity(user: UserRow, profile: Profile) -> UserIdentityRow:
    return UserIdentityRow(user_id=user.id, provider=profile.provider,
                           subject=profile.subject, claimed_username=profile.username)


async def _flush_or_conflict(db: AsyncSession, profile: Profile) -> None:
    """Two sign-ins racing for one name or one identity: the unique index decides."""
    try:
        await db.flush()
    except IntegrityError:
        await db.rollback()
        raise SignInRefused(
            f"an account named {profile.username} was just created by another sign-in; "
            "try again", code="identity_conflict") from None


async def _other_admins(db: AsyncSession, user: UserRow) -> bool:
    """Whether an active admin other than ``user`` exists (the last one is never demoted)."""
    count = await db.scalar(select(func.count()).select_from(UserRow).where(
        UserRow.role == Role.ADMIN, UserRow.is_active.is_(True), UserRow.id != user.id))
    return bool(count)
