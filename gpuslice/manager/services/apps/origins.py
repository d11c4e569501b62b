"""Each app of each session at its own origin, ``<app>--<session id>.<apps.domain>``, and the
login handed to that origin.

A browser's login cookie belongs to the manager's origin; an app's origin never sees it. To
enter an app, the manager's origin (``/s/<session>/<app>/…``, where the login cookie is) mints
a **code**: single-use, valid ``apps.enter_timeout`` seconds, bound to the login, the session
and the app. The browser carries it to ``<app origin>/_gpuslice/enter?code=…``, which trades it
(once: a conditional UPDATE, so two tries cannot both win) for the origin's own **cookie**,
``gpuslice_app``: host-only, HttpOnly, SameSite=Lax. That cookie opens this one app of this
one session, lives no longer than the login (a logout revokes the login, and the entry with
it), and is no bearer token: the API looks tokens up in ``api_tokens`` and never finds it.
Codes and cookies are stored as SHA-256 digests only; the retention loop deletes the entries
that open nothing any more (``purge``).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.sessions import FINAL
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ApiTokenRow, AppEntryRow, SessionRow, UserRow
from gpuslice.manager.errors import InvalidRequest, Unauthorized
from gpuslice.manager.security import token_digest
from gpuslice.manager.settings import AppsSettings

COOKIE = "gpuslice_app"
ENTER_PATH = "/_gpuslice/enter"
_CODE_PREFIX = "gsc_"  # never a login token's, nor an API token's, spelling
_COOKIE_PREFIX = "gsa_"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(
    r"^(?P<app>[a-z0-9][a-z0-9-]{0,31}?)--"
    r"(?P<session>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.(?P<domain>[a-z0-9.-]+)$"
)


@dataclass(frozen=True, slots=True)
class AppOrigin:
    """The app and session a request's ``Host`` names (or, with ``apps.port_range``, the
    port it came in on: ``port``)."""

    app: str
    session_id: str
    port: int | None = None


def cookie_name(at: AppOrigin) -> str:
    """The origin's cookie: ``gpuslice_app``, or on an app port ``gpuslice_app_<port>``
    (browsers send a host's cookies to all its ports: one name per port keeps each app's
    own, and its value opens that port's app only)."""
    return COOKIE if at.port is None else f"{COOKIE}_{at.port}"


def parse_host(host: str, domain: str) -> AppOrigin | None:
    """The app origin ``host`` (a ``Host`` header) names, or None for any other host."""
    name = host.lower()
    if name.startswith("["):
        return None
    name = name.rsplit(":", 1)[0] if ":" in name else name
    found = _HOST.match(name)
    if found is None or found["domain"] != domain:
        return None
    return AppOrigin(found["app"], found["session"])


def origin(scheme: str, port: int | None, session_id: str, app: str,
           settings: AppsSettings) -> str:
    """``scheme://<app>--<session>.<domain>[:port]``: ``port`` is where the manager was
    reached, unless ``apps.origin_port`` says otherwise."""
    port = settings.origin_port or port
    shown = f":{port}" if port and port != _DEFAULT_PORTS.get(scheme) else ""
    return f"{scheme}://{app}--{session_id}.{settings.domain}{shown}"


def app_url(base_url: str, session_id: str, app: str, settings: AppsSettings) -> str:
    """An app's URL for people, from the manager's own URL as they reached it."""
    parts = urlsplit(base_url)
    scheme = parts.scheme if parts.scheme in _DEFAULT_PORTS else "http"
    return origin(scheme, parts.port, session_id, app, settings) + "/"


def console_url(scheme: str, port: int | None, settings: AppsSettings) -> str:
    """Where an app's origin sends a browser to log in: ``apps.console_url``, else the
    manager at ``localhost`` (``*.localhost`` app origins are this machine too)."""
    if settings.console_url:
        return settings.console_url.rstrip("/")
    port = settings.origin_port or port
    shown = f":{port}" if port and port != _DEFAULT_PORTS.get(scheme) else ""
    return f"{scheme}://localhost{shown}"


async def mint_code(db: AsyncSession, login_id: str, session_id: str, app: str,
                    settings: AppsSettings) -> str:
    """A fresh single-use code that enters ``app`` of the session with login ``login_id``."""
    code = _CODE_PREFIX + secrets.token_urlsafe(32)
    db.add(AppEntryRow(login_id=login_id, session_id=session_id, app=app,
                       code_hash=token_digest(code),
                       code_expires_at=utcnow() + timedelta(seconds=settings.enter_timeout)))
    await db.commit()
    return code


async def redeem(db: AsyncSession, code: str, at: AppOrigin) -> str:
    """The origin's cookie value for ``code``, which is used up: ``InvalidRequest``
    ``enter_code_invalid`` for a code unknown, used, expired or for another app."""
    cookie = _COOKIE_PREFIX + secrets.token_urlsafe(32)
    taken = await db.execute(
        update(AppEntryRow)
        .where(AppEntryRow.code_hash == token_digest(code), AppEntryRow.cookie_hash.is_(None),
               AppEntryRow.code_expires_at > utcnow(), AppEntryRow.session_id == at.session_id,
               AppEntryRow.app == at.app)
        .values(cookie_hash=token_digest(cookie))
        .execution_options(synchronize_session=False)
    )
    await db.commit()
    if getattr(taken, "rowcount", 0) != 1:
        raise InvalidRequest(
            "this link into the app was already used, has expired or is for another app: "
            "open the app again from the console", field="code", code="enter_code_invalid")
    return cookie


async def purge(db: AsyncSession) -> int:
    """Delete the entries that open nothing any more (each browser GET of ``/s/…`` makes one):
    codes expired unused, and entries of logins revoked or expired or of sessions that ended.
    How many went."""
    now = utcnow()
    dead_logins = select(ApiTokenRow.id).where(
        or_(ApiTokenRow.revoked_at.is_not(None), ApiTokenRow.expires_at <= now))
    ended = select(SessionRow.id).where(SessionRow.status.in_(list(FINAL)))
    result = await db.execute(delete(AppEntryRow).where(or_(
        and_(AppEntryRow.cookie_hash.is_(None), AppEntryRow.code_expires_at <= now),
        AppEntryRow.login_id.in_(dead_logins), AppEntryRow.session_id.in_(ended),
    )).execution_options(synchronize_session=False))
    await db.commit()
    return int(getattr(result, "rowcount", 0) or 0)


async def holds(db: AsyncSession, cookie: str | None, at: AppOrigin) -> bool:
    """Whether ``cookie`` is this origin's, still good: the browser entered this app here."""
    if not cookie:
        return False
    try:
        await authenticate(db, cookie, at)
    except Unauthorized:
        return False
    return True


async def authenticate(db: AsyncSession, cookie: str, at: AppOrigin) -> tuple[UserRow,
                                                                              ApiTokenRow]:
    """The user and login behind an app origin's cookie, for this app only;
    ``Unauthorized`` for one unknown, of a revoked or expired login, or of a disabled user."""
    found = (await db.execute(
        select(UserRow, ApiTokenRow)
        .join(ApiTokenRow, ApiTokenRow.user_id == UserRow.id)
        .join(AppEntryRow, AppEntryRow.login_id == ApiTokenRow.id)
        .where(AppEntryRow.cookie_hash == token_digest(cookie),
               AppEntryRow.session_id == at.session_id, AppEntryRow.app == at.app,
               ApiTokenRow.revoked_at.is_(None))
    )).first()
    await db.commit()
    if found is None:
        raise Unauthorized("this app's login is unknown or ended: open the app again")
    user, login = found
    if login.expires_at is not None and login.expires_at <= utcnow():
        raise Unauthorized("your login has expired: log in again", code="token_expired")
    if not user.is_active:
        raise Unauthorized("this user is disabled")
    return user, login
