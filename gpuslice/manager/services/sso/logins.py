"""The browser's sign-in at the provider (identity.md §6.1): a sign-in in flight is a row
(``sso_logins``: the state's digest, the binder cookie's digest, the nonce and PKCE verifier
encrypted, where to go after), single use and ten minutes long; the callback deletes it before
anything else, checks the browser is the one that started it, and only then talks to the
provider."""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    ApiTokenRow,
    CliLoginRow,
    DeviceLoginRow,
    SsoLoginRow,
    SsoLogoutSeenRow,
    UserRow,
)
from gpuslice.manager.services.audit.context import current
from gpuslice.manager.services.identity.accounts import sign_in
from gpuslice.manager.services.identity.profile import SignInRefused, oidc_profile
from gpuslice.manager.services.sso.provider import ProviderError
from gpuslice.manager.services.sso.sessions import open_session
from gpuslice.manager.services.sso.state import Sso
from gpuslice.manager.services.sso.tokens import digest

log = logging.getLogger(__name__)
LOGIN_TTL = timedelta(minutes=10)
PER_ADDRESS = 30  # sign-ins in flight from one address
_PARAM_MAX = 2048


class SignInFailed(Exception):
    """The sign-in did not end in a login: ``message`` is the one line the login page shows,
    ``reason`` the audit row's, ``status`` the page's."""

    def __init__(self, message: str, reason: str, status: int = 403) -> None:
        super().__init__(message)
        self.message, self.reason, self.status = message, reason, status


@dataclass(frozen=True, slots=True)
class SignedIn:
    token: str
    row: ApiTokenRow
    user: UserRow
    next_path: str


async def start(db: AsyncSession, sso: Sso, next_path: str, address: str | None
                ) -> tuple[str, str]:
    """A new sign-in: the provider's authorization URL to send the browser to, and the binder
    to set as its cookie. At most ``PER_ADDRESS`` in flight from one address: the oldest give
    way (anyone may start one, and the table must not grow without bound; a refusal would let
    any web page lock an address out of single sign-on)."""
    now = utcnow()
    if address is not None:
        kept = select(SsoLoginRow.state_hash).where(SsoLoginRow.client_ip == address) \
            .order_by(SsoLoginRow.created_at.desc()).limit(PER_ADDRESS - 1)
        await db.execute(delete(SsoLoginRow).where(
            SsoLoginRow.client_ip == address, SsoLoginRow.state_hash.not_in(kept)))
    state, binder = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
    url = await sso.provider.authorize_url(state, nonce, verifier)
    db.add(SsoLoginRow(state_hash=digest(state), binder_hash=digest(binder),
                       secrets_enc=sso.vault.seal(json.dumps({"nonce": nonce,
                                                              "verifier": verifier})),
                       next_path=next_path, purpose="browser", client_ip=address,
                       created_at=now,
                       expires_at=now + LOGIN_TTL))
    await db.commit()
    return url, binder


async def callback(sessionmaker: async_sessionmaker[AsyncSession], sso: Sso,
                   params: dict[str, str], binder: str | None) -> SignedIn:
    """The provider's redirect back: a login token for the user it signed in, or
    ``SignInFailed``. Every attempt writes its ``auth.login`` row (method oidc)."""
    try:
        signed_in = await _callback(sessionmaker, sso, params, binder)
    except SignInFailed as err:
        log.info("SSO sign-in refused: %s (%s)", err.reason, err.message)
        async with sessionmaker() as db:
            db.add(_login_row("failure", err.reason, None))
            await db.commit()
        raise
    return signed_in


async def purge(db: AsyncSession) -> None:
    """Sign-ins that never came back, device codes never used, logout ids past their window
    (the retention loop's)."""
    now = utcnow()
    for table in (SsoLoginRow, DeviceLoginRow, SsoLogoutSeenRow, CliLoginRow):
        await db.execute(delete(table).where(table.expires_at < now))
    await db.commit()


async def _callback(sessionmaker: async_sessionmaker[AsyncSession], sso: Sso,
                    params: dict[str, str], binder: str | None) -> SignedIn:
    async with sessionmaker() as db:
        pending = await _take(db, params.get("state", ""))
    if "error" in params:
        raise SignInFailed("the identity provider refused the sign-in: "
                           f"{_shown(params['error'])}", "idp_error")
    if pending is None or pending.expires_at < utcnow():
        raise SignInFailed("this sign-in link was already used or has expired; start again",
                           "state_invalid", 400)
    if binder is None or digest(binder) != pending.binder_hash:
        raise SignInFailed("this sign-in was started in another browser (or its cookie was "
                           "lost); start again", "state_invalid", 400)
    kept = json.loads(sso.vault.open(pending.secrets_enc) or "{}")
    if "verifier" not in kept:
        raise SignInFailed("this sign-in cannot be finished (the manager's key changed); "
                           "start again", "state_invalid", 400)
    try:
        metadata = await sso.provider.metadata()
        issuer = params.get("iss")
        if issuer is not None and issuer != metadata["issuer"]:  # RFC 9207: mix-up
            raise SignInFailed("the sign-in came back from another identity provider than the "
                               "one it was sent to", "issuer_mismatch", 400)
        if not params.get("code"):
            raise SignInFailed("the identity provider sent no code", "idp_error", 400)
        tokens = await sso.provider.exchange(params["code"], kept["verifier"], kept["nonce"])
    except ProviderError as err:
        raise SignInFailed(f"the sign-in could not be checked: {err.message}", err.code,
                           502 if err.code == "idp_unreachable" else 400) from None
    async with sessionmaker() as db:
        try:
            user = await sign_in(db, oidc_profile(tokens["claims"], sso.settings), sso.settings)
        except SignInRefused as err:
            raise SignInFailed(err.message, err.code) from None
        token, row = await open_session(db, sso, user, tokens)
        db.add(_login_row("success", None, user))
        await db.commit()
    return SignedIn(token, row, user, pending.next_path)


async def _take(db: AsyncSession, state: str) -> SsoLoginRow | None:
    """The sign-in of ``state``, deleted (a second callback with it finds nothing)."""
    if not state or len(state) > _PARAM_MAX:
        return None
    row = await db.get(SsoLoginRow, digest(state))
    if row is None:
        return None
    result = await db.execute(delete(SsoLoginRow).where(SsoLoginRow.state_hash == row.state_hash))
    await db.commit()
    return row if result.rowcount == 1 else None  # type: ignore[attr-defined]


def _login_row(outcome: str, reason: str | None, user: UserRow | None) -> AuditRow:
    ctx = current()
    details = json.dumps({"method": "oidc"}, separators=(",", ":"))
    return AuditRow(
        id=uuid.uuid4().hex, at=utcnow(), actor_type="user" if user else "anonymous",
        actor_id=user.id if user else None, actor_name=user.username if user else None,
        via="sso", action="auth.login", outcome=outcome, reason=reason,
        target_type="user" if user else None, target_id=user.id if user else None,
        source_ip=ctx.source_ip if ctx else None,
        user_agent=_shown(ctx.user_agent, 256) if ctx and ctx.user_agent else None,
        request_id=ctx.request_id if ctx else None, details=details)


def _shown(text: str, size: int = 120) -> str:
    return "".join(c if c.isprintable() else "\ufffd" for c in text[:size])
