"""What admins do with identities: link an account to a provider's user (the answer to an
identity conflict), unlink it, see them."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.identity import IdentityLink, IdentityPublic
from gpuslice.manager.db.models import UserIdentityRow, UserRow
from gpuslice.manager.errors import Conflict, NotFound
from gpuslice.manager.services.audit import context as audit


async def identities_of(db: AsyncSession, user: UserRow) -> list[IdentityPublic]:
    rows = await db.scalars(select(UserIdentityRow).where(UserIdentityRow.user_id == user.id)
                            .order_by(UserIdentityRow.created_at))
    return [_public(r) for r in rows]


async def link(db: AsyncSession, user: UserRow, body: IdentityLink) -> IdentityPublic:
    """Link ``user`` to the provider's user ``body.subject``: their next sign-in there is
    this account. One account per (provider, subject), one subject per provider per account."""
    mine = await db.scalar(select(UserIdentityRow).where(
        UserIdentityRow.user_id == user.id, UserIdentityRow.provider == body.provider))
    if mine is not None:
        raise Conflict(f"{user.username} is already linked to a user at {body.provider}; "
                       f"unlink it first (gpuslice admin user unlink {user.username} "
                       f"--provider {body.provider})", code="already_linked")
    row = UserIdentityRow(user_id=user.id, provider=body.provider, subject=body.subject,
                          claimed_username=user.username)
    db.add(row)
    try:
        await db.flush()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"that {body.provider} user is linked to another account already",
                       field="subject", code="identity_taken") from None
    audit.note(provider=body.provider)
    await db.commit()
    return _public(row)


async def unlink(db: AsyncSession, user: UserRow, identity_id: str) -> None:
    """Unlink one of ``user``'s identities: a sign-in there no longer finds this account."""
    done = await db.execute(delete(UserIdentityRow).where(
        UserIdentityRow.id == identity_id, UserIdentityRow.user_id == user.id))
    if not getattr(done, "rowcount", 0):
        raise NotFound(f"{user.username} has no identity {identity_id}", field="identity_id")
    await db.commit()


def _public(row: UserIdentityRow) -> IdentityPublic:
    return IdentityPublic(
        id=row.id, provider=row.provider,
        subject=row.subject, claimed_username=row.claimed_username, groups=row.groups,
        created_at=row.created_at, last_login_at=row.last_login_at)
