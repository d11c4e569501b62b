"""Tokens and digests of single sign-on and device sign-in (no protocol library needed)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, SsoSessionRow, UserRow
from gpuslice.manager.security import USER_TOKEN_PREFIX, new_token, token_digest


def digest(secret: str) -> str:
    """How a state, binder, device code or logout id is stored: its SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def mint(db: AsyncSession, user_id: str, *, kind: str, name: str, ttl: float,
         sso_session_id: str | None, idle: float | None = None) -> tuple[str, ApiTokenRow]:
    """A new token of ``user_id`` in ``db``'s transaction: the secret and its row (``idle``:
    it also ends that many seconds after its last use, as a ``cli`` token does)."""
    secret = new_token(USER_TOKEN_PREFIX)
    row = ApiTokenRow(user_id=user_id, kind=kind, name=name, token_hash=token_digest(secret),
                      expires_at=utcnow() + timedelta(seconds=ttl),
                      sso_session_id=sso_session_id,
                      idle_seconds=None if idle is None else round(idle))
    db.add(row)
    return secret, row


async def may_mint(db: AsyncSession, user_id: str, sso_session_id: str | None) -> bool:
    """Whether a CLI's token may still be made for ``user_id`` from the sign-in it was
    approved in: the user is active and that provider session (if any) has not ended."""
    user = await db.get(UserRow, user_id)
    if user is None or not user.is_active:
        return False
    if sso_session_id is None:
        return True
    session = await db.get(SsoSessionRow, sso_session_id)
    return session is not None and session.ended_at is None
