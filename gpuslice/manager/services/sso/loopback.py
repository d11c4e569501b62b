"""``gpuslice login URL --sso`` with a browser (identity.md §6.7, RFC 8252's loopback
redirect): the CLI listens on 127.0.0.1, the browser's user allows it on the manager's
``/auth/cli`` page (signed in, by single sign-on or a password), the manager sends the browser
to ``http://127.0.0.1:<port>/callback`` with a one-minute code, and the CLI exchanges it with
its PKCE verifier (S256). The redirect is built from an integer port only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sso import DeviceToken
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, CliLoginRow, UserRow
from gpuslice.manager.errors import DomainError, InvalidRequest
from gpuslice.manager.services.audit import context
from gpuslice.manager.services.sso.tokens import digest, may_mint, mint
from gpuslice.manager.settings import AuthSettings

CODE_TTL = timedelta(seconds=60)
_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() takes "²"
_STATE = re.compile(r"[A-Za-z0-9_-]{16,128}")
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")


def check_request(port: str, state: str, challenge: str) -> int:
    """The CLI's listening port, once the request's parts are what the CLI sends; else
    ``InvalidRequest`` naming the part (a port is an integer 1024-65535, nothing else)."""
    if not _PORT.fullmatch(port) or not 1024 <= int(port) <= 65535:
        raise InvalidRequest(f"port must be a number from 1024 to 65535, got {port[:40]!r}",
                             field="port")
    if not _STATE.fullmatch(state):
        raise InvalidRequest("state must be 16 to 128 letters, digits, - or _", field="state")
    if not _CHALLENGE.fullmatch(challenge):
        raise InvalidRequest("code_challenge must be an S256 challenge (43 characters of "
                             "base64url)", field="code_challenge")
    return int(port)


async def allow(db: AsyncSession, user: UserRow, token: ApiTokenRow, challenge: str,
                client_host: str) -> str:
    """A one-minute code for the CLI that sent ``challenge`` (after the user allowed it)."""
    code = secrets.token_urlsafe(32)
    db.add(CliLoginRow(code_hash=digest(code), user_id=user.id, code_challenge=challenge,
                       client_host=client_host[:255], sso_session_id=token.sso_session_id,
                       expires_at=utcnow() + CODE_TTL))
    await db.commit()
    return code


async def exchange(db: AsyncSession, code: str, verifier: str, auth: AuthSettings
                   ) -> DeviceToken:
    """The CLI's token for ``code`` and its PKCE ``verifier``; the code is used up either
    way."""
    row = await db.get(CliLoginRow, digest(code))
    refused = DomainError("this sign-in code is unknown, used or expired, or the verifier "
                           "does not match: run gpuslice login again", code="invalid_grant")
    if row is None:
        raise refused
    result = await db.execute(delete(CliLoginRow).where(CliLoginRow.code_hash == row.code_hash))
    await db.commit()
    expected = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    if result.rowcount != 1 or row.expires_at <= utcnow() or not hmac.compare_digest(  # type: ignore[attr-defined]
            expected.rstrip(b"=").decode(), row.code_challenge):
        raise refused
    if not await may_mint(db, row.user_id, row.sso_session_id):
        raise DomainError("the sign-in that allowed this CLI has ended (signed out at the "
                          "identity provider, or the account was disabled): run gpuslice "
                          "login again", code="invalid_grant")
    context.note(client_host=row.client_host, method="cli-loopback")
    secret, token = mint(db, row.user_id, kind="cli", name=f"cli@{row.client_host}"[:64],
                         ttl=auth.cli_token_max, idle=auth.cli_token_idle,
                         sso_session_id=row.sso_session_id)
    await db.commit()
    assert token.expires_at is not None
    return DeviceToken(access_token=secret, expires_at=token.expires_at.isoformat())
