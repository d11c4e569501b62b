"""Browsers: the login cookie, and the ``Origin`` check that makes it safe to accept.

A login (``POST /api/v1/auth/login`` or the ``/login`` page) sets ``gpuslice_login``: the login
token itself, HttpOnly (scripts cannot read it), SameSite=Lax (other sites' forms and scripts do
not send it) and expiring with the token; a logout revokes the token, so the cookie dies with
it. The whole API and the app proxy accept it in place of ``Authorization: Bearer``. A browser
sends cookies on its own, so a request that writes (anything but GET, HEAD, OPTIONS) or opens a
WebSocket with the cookie must come from the manager's own origin (or one of
``auth.allowed_origins``), said by ``Origin`` (or ``Referer``): that stops cross-site request
forgery, SameSite being only the first line.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import Response

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.errors import Forbidden, Unauthorized

COOKIE = "gpuslice_login"
TWICE = "login_cookie_twice"  # the code of a request that carries two login cookies
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def login_cookie(conn: HTTPConnection) -> str | None:
    """The login cookie the browser sent; ``Unauthorized`` ``login_cookie_twice`` when it sent
    two: a page that shares the host (an app on a port of ``apps.port_range``) can plant a
    second one (a nameless cookie is sent as its value alone), and which one a parser keeps
    would decide whose console this is."""
    sent = [part for value in conn.headers.getlist("cookie") for part in value.split(";")
            if part.split("=", 1)[0].strip() == COOKIE]
    if len(sent) > 1:
        raise Unauthorized(
            f"this browser sent {len(sent)} {COOKIE} cookies (a page on this host may have set "
            "one): clear this site's cookies in the browser, then log in again",
            code=TWICE)
    return conn.cookies.get(COOKIE) or None


def set_login_cookie(response: Response, conn: HTTPConnection, token: str,
                     expires_at: datetime | None) -> None:
    max_age = None if expires_at is None else max(0, int((expires_at - utcnow()).total_seconds()))
    response.set_cookie(COOKIE, token, max_age=max_age, path="/", httponly=True, samesite="lax",
                        secure=scheme(conn) == "https")


def clear_login_cookie(response: Response, conn: HTTPConnection) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax",
                           secure=scheme(conn) == "https")


def scheme(conn: HTTPConnection) -> str:
    """``http`` or ``https`` (a WebSocket's ``ws``/``wss`` counted as its page's)."""
    return "https" if conn.url.scheme in ("https", "wss") else "http"


def own_origin(conn: HTTPConnection) -> str:
    """The origin the manager was reached at, as a browser names it."""
    return f"{scheme(conn)}://{conn.headers.get('host', conn.url.netloc)}"


def check_origin(conn: HTTPConnection, allowed: list[str]) -> None:
    """``Forbidden`` ``origin_mismatch`` unless the request comes from the manager's own origin
    or an allowed one."""
    origin = conn.headers.get("origin") or _origin_of(conn.headers.get("referer", ""))
    if not origin or origin == "null":
        raise Forbidden(
            "a browser request that writes with the login cookie must say its Origin",
            code="origin_mismatch",
        )
    accepted = {normalize(own_origin(conn)), *(normalize(o) for o in allowed)}
    if normalize(origin) not in accepted:
        raise Forbidden(
            f"pages from {origin} may not use the login cookie here (allowed: the manager's "
            "own origin and auth.allowed_origins)", code="origin_mismatch",
        )


def normalize(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, without the scheme's default port."""
    parts = urlsplit(origin.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        return origin
    default = _DEFAULT_PORTS.get(parts.scheme.lower())
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port and port != default else "")


def _origin_of(referer: str) -> str:
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
