"""The provider's sessions behind gpuslice tokens: made at a sign-in, re-checked with the
refresh token every ``auth.oidc.recheck_interval``, ended by a refused refresh, a back-channel
logout or a console logout; every token made from one ends with it."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ApiTokenRow,
    CliLoginRow,
    DeviceLoginRow,
    SsoLogoutSeenRow,
    SsoSessionRow,
    UserIdentityRow,
    UserRow,
)
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.identity.accounts import allowed, apply_groups
from gpuslice.manager.services.identity.profile import SignInRefused, oidc_profile
from gpuslice.manager.services.sso.provider import ProviderError
from gpuslice.manager.services.sso.state import Sso
from gpuslice.manager.services.sso.tokens import mint

log = logging.getLogger(__name__)
_CLAIM_FOR = timedelta(minutes=2)  # one replica re-checks a session at a time
_BATCH = 100
_JTI_KEPT = timedelta(minutes=10)


async def open_session(db: AsyncSession, sso: Sso, user: UserRow, tokens: dict[str, Any]
                       ) -> tuple[str, ApiTokenRow]:
    """The provider's session of this sign-in (its refresh and ID tokens encrypted) and the
    console's login token made from it, in ``db``'s transaction."""
    claims = tokens["claims"]
    refresh = tokens.get("refresh_token")
    row = SsoSessionRow(
        user_id=user.id, provider="oidc", subject=claims["sub"],
        idp_sid=claims["sid"] if isinstance(claims.get("sid"), str) else None,
        refresh_token_enc=sso.vault.seal(refresh) if isinstance(refresh, str) else None,
        id_token_enc=sso.vault.seal(tokens["id_token"]), last_refresh_at=utcnow())
    db.add(row)
    user.standing_until = _standing(sso)
    await db.flush()
    ttl = sso.auth.login_token_ttl
    if row.refresh_token_enc is None:  # nothing to re-check with: the session is short
        ttl = min(ttl, sso.settings.session_max)
    return mint(db, user.id, kind="login", name="login (sso)", ttl=ttl, sso_session_id=row.id)


async def end_sessions(db: AsyncSession, session_ids: list[str], reason: str) -> int:
    """End these sessions and revoke every token made from them (the caller commits), and drop
    the CLI sign-ins approved in them that no CLI has collected yet; how many tokens were
    revoked."""
    if not session_ids:
        return 0
    now = utcnow()
    await db.execute(update(SsoSessionRow).where(
        SsoSessionRow.id.in_(session_ids), SsoSessionRow.ended_at.is_(None))
        .values(ended_at=now, ended_reason=reason, refresh_token_enc=None))
    result = await db.execute(update(ApiTokenRow).where(
        ApiTokenRow.sso_session_id.in_(session_ids), ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=now))
    for table in (DeviceLoginRow, CliLoginRow):
        await db.execute(delete(table).where(table.sso_session_id.in_(session_ids)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def sign_out(db: AsyncSession, sso: Sso, session_id: str) -> str | None:
    """A console logout of a single sign-on: the session ends (no more re-checks) unless a
    token made from it lives on (a CLI's, approved from this sign-in), and the
    provider's sign-out URL to go on to (``auth.oidc.logout = "idp"``), None for ``local``
    or a provider without an end_session_endpoint."""
    row = await db.get(SsoSessionRow, session_id)
    id_token = sso.vault.open(row.id_token_enc) if row is not None and row.id_token_enc \
        else None
    others = await db.scalar(select(ApiTokenRow.id).where(
        ApiTokenRow.sso_session_id == session_id, ApiTokenRow.revoked_at.is_(None)).limit(1))
    if others is None:  # a CLI token approved from this sign-in keeps it re-checked
        await end_sessions(db, [session_id], "logout")
    await db.commit()
    if sso.settings.logout != "idp":
        return None
    try:
        return await sso.provider.end_session_url(id_token)
    except ProviderError as err:  # signed out here all the same
        log.warning("no sign-out at the provider: %s", err.message)
        return None


async def recheck_pass(sessionmaker: async_sessionmaker[AsyncSession], sso: Sso) -> int:
    """Refresh each session due (one replica each: a guarded claim); how many were checked.
    A refused refresh ends the session's tokens; new claims sync role and projects; an
    unreachable provider changes nothing (it is tried again next time)."""
    checked = 0
    for session_id in await _claim_due(sessionmaker, sso.settings.recheck_interval):
        checked += 1
        try:
            await _recheck(sessionmaker, sso, session_id)
        except Exception:  # one session's failure is logged; the others go on
            log.exception("re-check of SSO session %s failed; it is tried again next time",
                          session_id)
            await _release(sessionmaker, session_id)
    return checked


async def _recheck(sessionmaker: async_sessionmaker[AsyncSession], sso: Sso,
                   session_id: str) -> None:
    async with sessionmaker() as db:
        row = await db.get_one(SsoSessionRow, session_id)
        refresh = sso.vault.open(row.refresh_token_enc or "")
    if refresh is None:
        await _finish(sessionmaker, session_id, None, ended="idp: refresh token unreadable")
        return
    try:
        tokens = await sso.provider.refresh(refresh)
    except ProviderError as err:
        if err.code in ("invalid_grant", "token_invalid"):
            await _finish(sessionmaker, session_id, None, ended=f"idp: {err.code}")
        else:  # unreachable, or answering errors: nothing ends (a flapping provider)
            log.warning("re-check of SSO session %s kept it: %s", session_id, err.message)
            await _release(sessionmaker, session_id)
        return
    await _finish(sessionmaker, session_id, tokens, ended=None, sso=sso)


async def backchannel_logout(db: AsyncSession, claims: dict[str, Any], leeway: float = 0
                             ) -> int:
    """End the sessions a verified logout token names (its ``sid``, and the sessions of its
    ``sub`` stored without one; else every session of its ``sub``); refused when its ``jti``
    was seen, or when it was issued longer ago than a ``jti`` is kept (a replay could no
    longer be told). ``leeway``: the clock difference allowed. How many sessions ended."""
    now = utcnow()
    issued = claims.get("iat")
    if not isinstance(issued, int | float) or \
            issued < (now - _JTI_KEPT).timestamp():
        raise ProviderError(f"the logout token was issued more than "
                            f"{int(_JTI_KEPT.total_seconds()) // 60} minutes ago",
                            code="token_invalid")
    jti_hash = hashlib.sha256(str(claims["jti"]).encode()).hexdigest()
    if await db.get(SsoLogoutSeenRow, jti_hash) is not None:
        raise ProviderError("this logout token was already used", code="token_replayed")
    # kept while a token with this iat holds: until iat (at most leeway ahead) + _JTI_KEPT
    db.add(SsoLogoutSeenRow(jti_hash=jti_hash,
                            expires_at=now + _JTI_KEPT + timedelta(seconds=leeway)))
    query = select(SsoSessionRow.id, SsoSessionRow.user_id).where(
        SsoSessionRow.provider == "oidc", SsoSessionRow.ended_at.is_(None))
    sid, sub = claims.get("sid"), claims.get("sub")
    if isinstance(sid, str) and isinstance(sub, str):
        query = query.where(or_(SsoSessionRow.idp_sid == sid, and_(
            SsoSessionRow.idp_sid.is_(None), SsoSessionRow.subject == sub)))
    elif isinstance(sid, str):
        query = query.where(SsoSessionRow.idp_sid == sid)
    else:
        query = query.where(SsoSessionRow.subject == sub)
    found = (await db.execute(query)).all()
    await end_sessions(db, [session_id for session_id, _ in found], "idp: back-channel logout")
    for session_id, user_id in found:
        record(db, "auth.idp_logout", actor="system:oidc", target_type="user",
               target_id=user_id, details={"sso_session": session_id})
    await db.commit()
    return len(found)


async def _claim_due(sessionmaker: async_sessionmaker[AsyncSession], interval: float
                     ) -> list[str]:
    now = utcnow()
    async with sessionmaker() as db:
        due = list(await db.scalars(select(SsoSessionRow.id).where(
            SsoSessionRow.ended_at.is_(None), SsoSessionRow.refresh_token_enc.is_not(None),
            SsoSessionRow.last_refresh_at <= now - timedelta(seconds=interval),
            or_(SsoSessionRow.claimed_until.is_(None), SsoSessionRow.claimed_until < now))
            .order_by(SsoSessionRow.last_refresh_at).limit(_BATCH)))
        claimed = []
        for session_id in due:
            result = await db.execute(update(SsoSessionRow).where(
                SsoSessionRow.id == session_id, SsoSessionRow.ended_at.is_(None),
                or_(SsoSessionRow.claimed_until.is_(None), SsoSessionRow.claimed_until < now))
                .values(claimed_until=now + _CLAIM_FOR))
            if result.rowcount == 1:  # type: ignore[attr-defined]
                claimed.append(session_id)
        await db.commit()
    return claimed


async def _release(sessionmaker: async_sessionmaker[AsyncSession], session_id: str) -> None:
    async with sessionmaker() as db:
        await db.execute(update(SsoSessionRow).where(SsoSessionRow.id == session_id)
                         .values(claimed_until=None))
        await db.commit()


async def _finish(sessionmaker: async_sessionmaker[AsyncSession], session_id: str,
                  tokens: dict[str, Any] | None, *, ended: str | None,
                  sso: Sso | None = None) -> None:
    """Apply a re-check's result (the refresh token rotated is stored at once)."""
    async with sessionmaker() as db:
        row = await db.get_one(SsoSessionRow, session_id)
        if ended is None and tokens is not None and sso is not None:
            ended = await _apply(db, sso, row, tokens)
            if ended is None:  # the provider still knows the user: their tokens go on
                await db.execute(update(UserRow).where(UserRow.id == row.user_id)
                                 .values(standing_until=_standing(sso)))
        if ended is not None:
            revoked = await end_sessions(db, [session_id], ended)
            record(db, "auth.session_refresh_failed", actor="system:oidc", target_type="user",
                   target_id=row.user_id, reason=ended.removeprefix("idp: "),
                   details={"sso_session": session_id, "tokens_revoked": revoked})
        await db.commit()


def _standing(sso: Sso) -> datetime | None:
    """Until when an SSO user's API and CLI tokens work after a sign-in or re-check at the
    provider (``auth.oidc.offline_max_age``; 0: no bound)."""
    age = sso.settings.offline_max_age
    return utcnow() + timedelta(seconds=age) if age else None


async def _apply(db: AsyncSession, sso: Sso, row: SsoSessionRow, tokens: dict[str, Any]
                 ) -> str | None:
    """Store the refresh's tokens and sync what its claims say; the reason to end the session
    when they say the user may no longer sign in."""
    if isinstance(tokens.get("refresh_token"), str):
        row.refresh_token_enc = sso.vault.seal(tokens["refresh_token"])
    if isinstance(tokens.get("id_token"), str):
        row.id_token_enc = sso.vault.seal(tokens["id_token"])
    row.last_refresh_at, row.claimed_until = utcnow(), None
    claims = tokens.get("claims")
    if not isinstance(claims, dict):  # no ID token with this refresh: nothing more to sync
        return None
    if claims.get("sub") != row.subject:
        return "idp: the provider answered for another user"
    identity = await db.scalar(select(UserIdentityRow).where(
        UserIdentityRow.provider == "oidc", UserIdentityRow.subject == row.subject))
    user = await db.get(UserRow, row.user_id)
    if identity is None or user is None:
        return "idp: identity unlinked"
    try:
        profile = oidc_profile(claims, sso.settings)
    except SignInRefused as err:
        return f"idp: {err.code}"
    if profile.groups is not None and not allowed(profile, sso.settings):
        return "idp: not_allowed"
    identity.checked_at = utcnow()
    await apply_groups(db, user, identity, profile, sso.settings)
    return None
