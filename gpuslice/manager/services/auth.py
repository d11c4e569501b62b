"""Login, bearer-token authentication, and users' API tokens."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.users import ApiTokenCreate, ApiTokenCreated, ApiTokenPublic
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiToken, User
from gpuslice.manager.errors import NotFound, Unauthorized
from gpuslice.manager.security import (
    USER_TOKEN_PREFIX,
    new_token,
    token_digest,
    verify_password,
)

# A token's last use is written at most this often, so reads do not become writes.
_TOUCH_EVERY = timedelta(minutes=1)
# Verified against when a username does not exist, so a miss takes as long as a wrong password.
_DUMMY_HASH = (
    "$argon2id$v=19$m=65536,t=3,p=4$wClreS0C1Bn7mcGEL7vUCA$"
    "yeeLbHJlykrX6RsW4z4Jybi5TDmqlM4WGI1CspTOG1M"
)


async def login(
    db: AsyncSession, username: str, password: str, ttl: float
) -> tuple[str, ApiToken]:
    """Check the password; a new login token (the secret and its row)."""
    user = await db.scalar(select(User).where(User.username == username))
    ok = await verify_password(user.password_hash if user else _DUMMY_HASH, password)
    if user is None or not ok or not user.is_active:
        raise Unauthorized("wrong username or password", code="bad_credentials")
    token = new_token(USER_TOKEN_PREFIX)
    row = ApiToken(
        user_id=user.id, kind="login", name="login", token_hash=token_digest(token),
        expires_at=utcnow() + timedelta(seconds=ttl),
    )
    db.add(row)
    await db.commit()
    return token, row


async def authenticate(db: AsyncSession, token: str) -> tuple[User, ApiToken]:
    """The active user and token for a bearer secret; ``Unauthorized`` otherwise."""
    now = utcnow()
    found = (
        await db.execute(
            select(User, ApiToken)
            .join(ApiToken, ApiToken.user_id == User.id)
            .where(ApiToken.token_hash == token_digest(token), ApiToken.revoked_at.is_(None))
        )
    ).first()
    if found is None:
        raise Unauthorized("this token is unknown or was revoked")
    user, row = found
    if row.expires_at is not None and row.expires_at <= now:
        raise Unauthorized("this token has expired", code="token_expired")
    if not user.is_active:
        raise Unauthorized("this user is disabled")
    if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
        await db.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))
    await db.commit()  # the request's later work starts a fresh transaction
    return user, row


async def revoke_token(db: AsyncSession, user: User, token_id: str) -> None:
    result = await db.execute(
        update(ApiToken)
        .where(ApiToken.id == token_id, ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no active token {token_id}")
    await db.commit()


async def create_api_token(db: AsyncSession, user: User, body: ApiTokenCreate) -> ApiTokenCreated:
    token = new_token(USER_TOKEN_PREFIX)
    expires = utcnow() + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    row = ApiToken(
        user_id=user.id, kind="api", name=body.name, token_hash=token_digest(token),
        expires_at=expires,
    )
    db.add(row)
    await db.commit()
    return ApiTokenCreated(**_public(row).model_dump(), token=token)


async def list_api_tokens(db: AsyncSession, user: User) -> list[ApiTokenPublic]:
    rows = await db.scalars(
        select(ApiToken)
        .where(ApiToken.user_id == user.id, ApiToken.kind == "api", ApiToken.revoked_at.is_(None))
        .order_by(ApiToken.created_at)
    )
    return [_public(r) for r in rows]


def _public(row: ApiToken) -> ApiTokenPublic:
    return ApiTokenPublic(
        id=row.id, name=row.name, created_at=row.created_at, expires_at=row.expires_at,
        last_used_at=row.last_used_at,
    )
