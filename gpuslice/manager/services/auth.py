"""Login, bearer-token authentication, and users' API tokens."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.users import (
    ApiTokenCreate,
    ApiTokenCreated,
    ApiTokenPublic,
    PasswordChange,
    Role,
    TokenInfo,
)
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, UserRow
from gpuslice.manager.errors import (
    DomainError,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unauthorized,
    Unavailable,
)
from gpuslice.manager.security import (
    USER_TOKEN_PREFIX,
    hash_password,
    new_token,
    token_digest,
)
from gpuslice.manager.services.audit import context as audit
from gpuslice.manager.services.login_throttle import LoginThrottle
from gpuslice.manager.settings import AuthSettings

# A directory's sign-in (services/identity/ldap.py, given by the routes where auth.ldap is on):
# the user whose password binds at the directory, or a DomainError with the line to show.
DirectorySignIn = Callable[[AsyncSession, str, str], Awaitable[UserRow]]
# what a failed local password tried at the directory may say (nothing about the directory)
_SILENT = frozenset({"bad_credentials", "account_locked", "directory_unavailable"})

# A token's last use is written at most this often, so reads do not become writes.
_TOUCH_EVERY = timedelta(minutes=1)
#: What an expired token of a kind answers: what to do next.
EXPIRED = {"cli": "this token has expired: log in again with gpuslice login URL"}
#: What an SSO user's API or CLI token answers once their standing has passed.
SSO_REQUIRED = ("sign in with single sign-on again to keep using your tokens: "
                "gpuslice login URL --sso")
# the kinds of token that outlive a provider's session (login tokens end with theirs)
_STANDING_KINDS = frozenset({"api", "cli"})
# Verified against when a username does not exist, so a miss takes as long as a wrong password.
_DUMMY_HASH = (
    "$argon2id$v=19$m=65536,t=3,p=4$wClreS0C1Bn7mcGEL7vUCA$"
    "yeeLbHJlykrX6RsW4z4Jybi5TDmqlM4WGI1CspTOG1M"
)


async def login(
    db: AsyncSession, username: str, password: str, ttl: float, throttle: LoginThrottle,
    address: str | None, directory: DirectorySignIn | None = None, who: str = "all",
) -> tuple[str, ApiTokenRow]:
    """Check the password (unless the username or the address is throttled: 429 first, no
    hash computed, no bind made); a new login token (the secret and its row). ``who``:
    ``auth.password_login``."""
    user = await _password_login(db, username, password, throttle, address, directory, who)
    token = new_token(USER_TOKEN_PREFIX)
    row = ApiTokenRow(
        user_id=user.id, kind="login", name="login", token_hash=token_digest(token),
        expires_at=utcnow() + timedelta(seconds=ttl),
    )
    db.add(row)
    await db.commit()
    return token, row


async def cli_login(
    db: AsyncSession, username: str, password: str, host: str, settings: AuthSettings,
    throttle: LoginThrottle, address: str | None, directory: DirectorySignIn | None = None,
) -> tuple[str, ApiTokenRow]:
    """A password login (checked and throttled as :func:`login`) that makes a ``cli`` token
    straight away: no login token is left behind beside it."""
    user = await _password_login(db, username, password, throttle, address, directory,
                                 settings.password_login)
    audit.note(kind="cli")
    token, row = issue_cli_token(db, user, settings, host)
    await db.commit()
    return token, row


async def authenticate(db: AsyncSession, token: str) -> tuple[UserRow, ApiTokenRow]:
    """The active user and token for a bearer secret; ``Unauthorized`` otherwise."""
    now = utcnow()
    found = (
        await db.execute(
            select(UserRow, ApiTokenRow)
            .join(ApiTokenRow, ApiTokenRow.user_id == UserRow.id)
            .where(ApiTokenRow.token_hash == token_digest(token), ApiTokenRow.revoked_at.is_(None))
        )
    ).first()
    if found is None:
        await _rejected(db, token)
        raise Unauthorized("this token is unknown or was revoked")
    user, row = found
    if _expired(row, now):
        audit.rejected(user.id, user.username, f"{row.kind}_token", row.id, "token_expired")
        raise Unauthorized(EXPIRED[row.kind] if row.kind in EXPIRED else "this token has expired",
                           code="token_expired")
    if not user.is_active:
        audit.rejected(user.id, user.username, f"{row.kind}_token", row.id, "inactive")
        raise Unauthorized("this user is disabled")
    if _standing_passed(user, row, now):
        audit.rejected(user.id, user.username, f"{row.kind}_token", row.id, "sso_required")
        raise Unauthorized(SSO_REQUIRED, code="sso_required")
    if row.last_used_at is None or now - row.last_used_at > _touch_every(row):
        await db.execute(
            update(ApiTokenRow).where(ApiTokenRow.id == row.id).values(last_used_at=now)
        )
    await db.commit()  # the request's later work starts a fresh transaction
    return user, row


def issue_cli_token(
    db: AsyncSession, user: UserRow, settings: AuthSettings, host: str
) -> tuple[str, ApiTokenRow]:
    """A ``cli`` token (the secret and its row, added to ``db``; the caller commits): it ends
    ``cli_token_idle`` seconds after its last use, and ``cli_token_max`` after it is made."""
    token = new_token(USER_TOKEN_PREFIX)
    now = utcnow()
    row = ApiTokenRow(
        user_id=user.id, kind="cli", name=f"cli@{host}" if host else "cli",
        token_hash=token_digest(token), created_at=now,
        expires_at=now + timedelta(seconds=settings.cli_token_max),
        idle_seconds=settings.cli_token_idle,
    )
    db.add(row)
    return token, row


def token_info(row: ApiTokenRow) -> TokenInfo:
    """What the holder of a token may know of it (never the secret)."""
    idle_end = None
    if row.idle_seconds is not None:
        idle_end = _idle_end(row)
        if row.expires_at is not None:
            idle_end = min(idle_end, row.expires_at)
    return TokenInfo(
        id=row.id, kind=row.kind, name=row.name, created_at=row.created_at,
        last_used_at=row.last_used_at, expires_at=row.expires_at,
        idle_seconds=row.idle_seconds, idle_expires_at=idle_end,
    )


def _standing_passed(user: UserRow, row: ApiTokenRow, now: datetime) -> bool:
    """An SSO user not seen at the provider for ``auth.oidc.offline_max_age``: their tokens
    that are not bound to a provider session may no longer be used (the user may have been
    removed there)."""
    return (user.source == "oidc" and row.kind in _STANDING_KINDS
            and user.standing_until is not None and user.standing_until <= now)


def _expired(row: ApiTokenRow, now: datetime) -> bool:
    if row.expires_at is not None and row.expires_at <= now:
        return True
    return row.idle_seconds is not None and _idle_end(row) <= now


def _idle_end(row: ApiTokenRow) -> datetime:
    return (row.last_used_at or row.created_at) + timedelta(seconds=row.idle_seconds or 0)


def _touch_every(row: ApiTokenRow) -> timedelta:
    """A token with an idle limit is touched often enough that the limit holds to a quarter
    of itself (a minute at most, as every token)."""
    if row.idle_seconds is None:
        return _TOUCH_EVERY
    return min(_TOUCH_EVERY, timedelta(seconds=row.idle_seconds / 4))


async def _password_login(
    db: AsyncSession, username: str, password: str, throttle: LoginThrottle,
    address: str | None, directory: DirectorySignIn | None = None, who: str = "all",
) -> UserRow:
    """The active user whose password this is (the audit row armed), else a one-line refusal.
    ``who`` (``auth.password_login``) may keep the password for local accounts or admins.
    A local user's password is checked by argon2; a directory user's (``directory`` given, or
    a user it made) by a bind at the directory (the throttle counts the attempt first)."""
    audit.attempted(username)
    await throttle.admit(db, username, address)
    user = await db.scalar(select(UserRow).where(UserRow.username == username))
    await db.commit()  # no transaction held while the hash runs (or waits for its turn)
    if user is None and directory is not None or (user is not None and user.source == "ldap"):
        user, method = await _directory_login(db, username, password, directory), "ldap"
    else:
        user, method = await _local_login(db, user, password, throttle, directory)
    if not _may_use_password(user, method, who):  # told only once the password is right
        audit.note(method=method)
        audit.refused("password_login_off")
        raise Forbidden("signing in with a password is for "
                        + ("administrators" if who == "admins" else "local accounts")
                        + " here: sign in with single sign-on (gpuslice login URL --sso)",
                        code="password_login_off")
    await throttle.succeeded(db, username, address)
    audit.note(method=method)
    audit.arm_user(user.id, user.username, "password", None)  # the row joins the token's commit
    return user


def _may_use_password(user: UserRow, method: str, who: str) -> bool:
    """Whether ``auth.password_login`` (``who``) lets this user sign in with a password."""
    if who == "local":
        return method == "password"
    if who == "admins":
        return method == "password" and Role(user.role) == Role.ADMIN
    return True


async def _local_login(db: AsyncSession, user: UserRow | None, password: str,
                       throttle: LoginThrottle, directory: DirectorySignIn | None
                       ) -> tuple[UserRow, str]:
    ok = await throttle.checks.verify(user.password_hash if user else _DUMMY_HASH, password)
    if user is not None and not ok and user.source == "local" and directory is not None:
        # the directory's user of this name: told why a local account is not theirs (or
        # linked to it where auth.ldap.link_existing says so); nothing said to anyone else
        try:
            return await directory(db, user.username, password), "ldap"
        except DomainError as err:
            if err.code not in _SILENT:
                raise
    if user is None or not ok or not user.is_active:
        audit.note(method="password")
        audit.refused("bad_credentials" if user is None or not ok else "inactive")
        raise Unauthorized("wrong username or password", code="bad_credentials")
    return user, "password"


async def _directory_login(db: AsyncSession, username: str, password: str,
                           directory: DirectorySignIn | None) -> UserRow:
    audit.note(method="ldap")
    if directory is None:
        audit.refused("ldap_off")
        raise Unavailable("this account signs in with the LDAP directory, which is not "
                          "configured now (auth.ldap.url): ask an administrator",
                          code="directory_unavailable")
    try:
        return await directory(db, username, password)
    except DomainError as err:
        audit.refused(err.code)
        raise


async def _rejected(db: AsyncSession, token: str) -> None:
    """A revoked token presented is audited (one never known is not: anyone can send those)."""
    found = (await db.execute(
        select(UserRow.id, UserRow.username, ApiTokenRow.kind, ApiTokenRow.id)
        .join(ApiTokenRow, ApiTokenRow.user_id == UserRow.id)
        .where(ApiTokenRow.token_hash == token_digest(token)))).first()
    if found is not None:
        user_id, username, kind, token_id = found
        audit.rejected(user_id, username, f"{kind}_token", token_id, "token_revoked")


async def revoke_token(db: AsyncSession, user: UserRow, token_id: str) -> None:
    result = await db.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.id == token_id, ApiTokenRow.user_id == user.id,
               ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no active token {token_id}")
    await db.commit()


async def create_api_token(
    db: AsyncSession, user: UserRow, body: ApiTokenCreate, sso_max_days: int
) -> ApiTokenCreated:
    """An API token of the expiry asked (none: until revoked); an SSO user's lasts at most
    ``sso_max_days`` (``auth.oidc.api_token_max_days``), asked for longer or not."""
    token = new_token(USER_TOKEN_PREFIX)
    days = body.expires_in_days
    if user.source == "oidc":
        days = min(days or sso_max_days, sso_max_days)
    expires = utcnow() + timedelta(days=days) if days else None
    row = ApiTokenRow(
        user_id=user.id, kind="api", name=body.name, token_hash=token_digest(token),
        expires_at=expires,
    )
    db.add(row)
    await db.commit()
    return ApiTokenCreated(**_public(row).model_dump(), token=token)


async def change_password(
    db: AsyncSession, user: UserRow, current: ApiTokenRow, body: PasswordChange,
    throttle: LoginThrottle, address: str | None,
) -> None:
    """Check the current password (throttled like a login), set the new one, and end every
    other login token of the user (and their API tokens, unless kept)."""
    managed_elsewhere(user)
    await throttle.admit(db, user.username, address)
    ok = await throttle.checks.verify(user.password_hash, body.current_password)
    if not ok:
        raise Unauthorized("the current password is wrong", field="current_password",
                           code="bad_credentials")
    await throttle.succeeded(db, user.username, address)
    new_hash = await hash_password(body.new_password)
    await db.execute(update(UserRow).where(UserRow.id == user.id).values(password_hash=new_hash))
    await end_tokens(db, user.id, keep_api_tokens=body.keep_api_tokens, keep=current.id)
    await db.commit()


def managed_elsewhere(user: UserRow) -> None:
    """Refuse to set a password for a user who signs in at an identity provider."""
    if user.source != "local":
        where = "the LDAP directory" if user.source == "ldap" else "single sign-on"
        raise InvalidRequest(f"{user.username} signs in with {where}: the password is "
                             f"changed there, not in gpuslice", field="password",
                             code="password_managed_by_idp")


async def end_tokens(
    db: AsyncSession, user_id: str, *, keep_api_tokens: bool, keep: str | None = None
) -> None:
    """Revoke the user's login and CLI tokens (and API tokens unless ``keep_api_tokens``), but
    ``keep`` (the token the change was made with). In the caller's transaction."""
    kinds = ["login", "cli"] if keep_api_tokens else ["login", "cli", "api"]
    await db.execute(
        update(ApiTokenRow)
        .where(ApiTokenRow.user_id == user_id, ApiTokenRow.kind.in_(kinds),
               ApiTokenRow.revoked_at.is_(None), ApiTokenRow.id != (keep or ""))
        .values(revoked_at=utcnow())
    )


async def list_api_tokens(db: AsyncSession, user: UserRow) -> list[ApiTokenPublic]:
    """The user's API and CLI tokens not revoked, expired ones included (marked so)."""
    rows = await db.scalars(
        select(ApiTokenRow)
        .where(ApiTokenRow.user_id == user.id, ApiTokenRow.kind.in_(("api", "cli")),
               ApiTokenRow.revoked_at.is_(None))
        .order_by(ApiTokenRow.created_at)
    )
    return [_public(r) for r in rows]


def _public(row: ApiTokenRow) -> ApiTokenPublic:
    expired = _expired(row, utcnow())
    return ApiTokenPublic(
        id=row.id, name=row.name, kind=row.kind, created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at, status="expired" if expired else "active",
    )
