"""``gpuslice login --sso --device`` (identity.md §6.7, RFC 8628's shape): the CLI asks for a
code, a signed-in user approves it on the manager's ``/device`` page after seeing which host,
OS user and address asks, and the CLI's next poll gets a token. Codes live ten minutes, the
device code is stored as a digest, and the page is the manager's own (never the provider's:
device-code phishing)."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sso import (
    DeviceCode,
    DeviceRequestPublic,
    DeviceStart,
    DeviceToken,
)
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, DeviceLoginRow, UserRow
from gpuslice.manager.errors import DomainError, InvalidRequest, NotFound, TooManyRequests
from gpuslice.manager.services.audit import context
from gpuslice.manager.services.audit.record import record
from gpuslice.manager.services.login_throttle import LoginThrottle
from gpuslice.manager.services.sso.tokens import digest, may_mint, mint
from gpuslice.manager.settings import AuthSettings

CODE_TTL = timedelta(minutes=10)
INTERVAL = 5
# The CLI's token (a login token with the CLI's lifetime; a `cli` kind comes with issue 42's
# token branch).
PER_ADDRESS = 20  # codes one address may ask for within CODE_TTL
_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628 §6.1: no vowels, no look-alikes
_TYPED = re.compile(r"[A-Za-z0-9 -]{1,32}")  # a user code as a user may type it


class DeviceError(DomainError):
    """A poll's answer that is not a token (RFC 8628 §3.5): ``authorization_pending``,
    ``slow_down``, ``access_denied``, ``expired_token``."""


async def start(db: AsyncSession, body: DeviceStart, address: str | None,
                public_url: str) -> DeviceCode:
    """A new device sign-in (at most ``PER_ADDRESS`` per address within ten minutes)."""
    now = utcnow()
    recent = await db.scalar(select(func.count()).select_from(DeviceLoginRow).where(
        DeviceLoginRow.client_ip == address, DeviceLoginRow.expires_at > now))
    if address is not None and (recent or 0) >= PER_ADDRESS:
        first = await db.scalar(select(func.min(DeviceLoginRow.expires_at)).where(
            DeviceLoginRow.client_ip == address, DeviceLoginRow.expires_at > now))
        wait = max(1, int(((first or now) - now).total_seconds()) + 1)
        raise TooManyRequests(f"this address asked for {recent} device codes in ten minutes: "
                              "use one of them, or wait until they expire", retry_after=wait)
    device_code = secrets.token_urlsafe(32)
    user_code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
    user_code = f"{user_code[:4]}-{user_code[4:]}"
    db.add(DeviceLoginRow(
        device_code_hash=digest(device_code), user_code=user_code,
        client_host=_shown(body.client_host), client_os_user=_shown(body.os_user),
        client_ip=address, created_at=now, expires_at=now + CODE_TTL, interval=INTERVAL))
    await db.commit()
    uri = f"{public_url.rstrip('/')}/device"
    return DeviceCode(device_code=device_code, user_code=user_code, verification_uri=uri,
                      verification_uri_complete=f"{uri}?code={user_code}",
                      expires_in=int(CODE_TTL.total_seconds()), interval=INTERVAL)


async def poll(db: AsyncSession, device_code: str, auth: AuthSettings) -> DeviceToken:
    """The token once approved (the row is deleted then), else the RFC 8628 error."""
    now = utcnow()
    row = await db.get(DeviceLoginRow, digest(device_code))
    if row is None or row.expires_at <= now:
        raise DeviceError("the code expired; run gpuslice login again", code="expired_token")
    if row.denied_at is not None:
        await _drop(db, row)
        raise DeviceError("the sign-in was denied in the browser", code="access_denied")
    if row.approved_by is None:
        early = row.last_poll_at is not None and \
            (now - row.last_poll_at).total_seconds() < row.interval
        row.interval += 5 if early else 0
        row.last_poll_at = now
        await db.commit()
        if early:
            raise DeviceError(f"polling too fast: wait {row.interval} s between polls",
                              code="slow_down")
        raise DeviceError("waiting for the code to be approved in a browser",
                          code="authorization_pending")
    if not await _drop(db, row):  # another poll took it
        raise DeviceError("the code expired; run gpuslice login again", code="expired_token")
    if not await may_mint(db, row.approved_by, row.sso_session_id):
        await db.commit()
        raise DeviceError("the sign-in that approved the code has ended (signed out at the "
                          "identity provider, or the account was disabled); run gpuslice "
                          "login again", code="expired_token")
    secret, token = mint(db, row.approved_by, kind="cli", name=f"cli@{row.client_host}"[:64],
                         ttl=auth.cli_token_max, idle=auth.cli_token_idle,
                         sso_session_id=row.sso_session_id)
    await db.commit()
    assert token.expires_at is not None
    return DeviceToken(access_token=secret, expires_at=token.expires_at.isoformat())


async def pending(db: AsyncSession, user_code: str) -> DeviceRequestPublic:
    """The request behind ``user_code`` as the approving page shows it. Not counted as a
    login: a link from another site may open the page with the login cookie (SameSite=Lax),
    so only the decision, an Origin-checked post, counts a wrong code."""
    return _public(await _by_code(db, user_code))


async def decide(db: AsyncSession, user: UserRow, token: ApiTokenRow, user_code: str,
                 approve: bool, address: str | None, throttle: LoginThrottle, *, page: bool
                 ) -> DeviceRequestPublic:
    """Approve (the CLI gets a token as ``user``, tied to the provider session ``token`` came
    from) or deny the request behind ``user_code``. A code not found counts as a failed
    login of ``user`` (a signed-in user cannot guess codes faster than passwords). Audited:
    the API request's own row, or (``page``: the /device page, outside the API) a row
    written here."""
    row = await _guarded(db, user, user_code, throttle, address)
    shown = _public(row)
    now = utcnow()
    values = ({"approved_by": user.id, "approved_at": now, "approved_ip": address,
               "sso_session_id": token.sso_session_id} if approve else {"denied_at": now})
    result = await db.execute(update(DeviceLoginRow).where(
        DeviceLoginRow.device_code_hash == row.device_code_hash,
        DeviceLoginRow.approved_by.is_(None), DeviceLoginRow.denied_at.is_(None))
        .values(**values))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no pending sign-in with the code {_shown(user_code)}")
    said = {"client_host": row.client_host, "os_user": row.client_os_user,
            "client_ip": row.client_ip, "approved": approve}
    context.note(**said)
    if page:
        record(db, "auth.device.approve" if approve else "auth.device.deny",
               actor=f"user:{user.username}", target_type="user", target_id=user.id,
               details=said)
    await db.commit()
    return shown


def _public(row: DeviceLoginRow) -> DeviceRequestPublic:
    return DeviceRequestPublic(
        user_code=row.user_code, client_host=row.client_host, os_user=row.client_os_user,
        client_ip=row.client_ip, age_seconds=int((utcnow() - row.created_at).total_seconds()))


def normal_code(user_code: str) -> str:
    """``wdjb mjht`` or ``WDJBMJHT`` as the CLI printed it: ``WDJB-MJHT``."""
    letters = "".join(c for c in user_code.upper() if c.isalnum())
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else user_code.upper()


async def _guarded(db: AsyncSession, user: UserRow, user_code: str, throttle: LoginThrottle,
                   address: str | None) -> DeviceLoginRow:
    await throttle.admit(db, user.username, address)
    row = await _by_code(db, user_code)
    await throttle.succeeded(db, user.username, address)
    await db.commit()
    return row


async def _by_code(db: AsyncSession, user_code: str) -> DeviceLoginRow:
    if not _TYPED.fullmatch(user_code):  # before any query (PostgreSQL refuses a NUL)
        raise InvalidRequest("the code is letters, digits, spaces and dashes as the CLI "
                             "printed it (such as WDJB-MJHT)", field="user_code")
    row = await db.scalar(select(DeviceLoginRow).where(
        DeviceLoginRow.user_code == normal_code(user_code)))
    if row is None or row.expires_at <= utcnow() or row.denied_at or row.approved_by:
        raise NotFound(f"no pending sign-in with the code {_shown(user_code)}: check the "
                       "code the CLI printed (it lives ten minutes)")
    return row


async def _drop(db: AsyncSession, row: DeviceLoginRow) -> bool:
    result = await db.execute(delete(DeviceLoginRow).where(
        DeviceLoginRow.device_code_hash == row.device_code_hash))
    return result.rowcount == 1  # type: ignore[attr-defined]


def _shown(text: str) -> str:
    return "".join(c if c.isprintable() else "\ufffd" for c in text[:255])
