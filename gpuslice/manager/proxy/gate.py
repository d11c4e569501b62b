"""Who is asking, for the proxy: a bearer token (the CLI, scripts), the login cookie (a
browser on the manager's origin) or an app origin's own cookie (a browser on that app's
origin). A browser's cookie must come with its own origin to write or open a WebSocket."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from gpuslice.manager.api import browser
from gpuslice.manager.errors import Unauthorized
from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.apps.access import AppRoute, Gate
from gpuslice.manager.services.apps.origins import AppOrigin
from gpuslice.manager.settings import ManagerSettings


def bearer(conn: HTTPConnection) -> str | None:
    kind, _, value = conn.headers.get("authorization", "").partition(" ")
    return value.strip() if kind.lower() == "bearer" and value.strip() else None


def credentials(conn: HTTPConnection) -> tuple[str, bool]:
    """The caller's secret on the manager's origin, and whether it came as the login
    cookie."""
    token = bearer(conn)
    if token:
        return token, False
    cookie = browser.login_cookie(conn)
    if cookie:
        return cookie, True
    raise Unauthorized("log in first (the /login page, or `Authorization: Bearer <token>`)")


async def authorize(conn: HTTPConnection, gate: Gate, settings: ManagerSettings,
                    session_id: str, app: str, *, writes: bool) -> AppRoute:
    """The app's route for the caller on the manager's origin, or the domain error that says
    why not. ``writes``: a request that changes something, or a WebSocket (the Origin check
    applies to cookies)."""
    secret, by_cookie = credentials(conn)
    if by_cookie and writes:
        browser.check_origin(conn, settings.auth.allowed_origins)
    return await gate.route(secret, session_id, app)


async def authorize_at_origin(conn: HTTPConnection, gate: Gate, at: AppOrigin, *,
                              writes: bool) -> AppRoute:
    """The app's route for a caller on the app's own origin: a bearer token, or that origin's
    cookie (the manager's login cookie is never one: it is not sent here, and not taken). A
    write or WebSocket with the cookie must come from this very origin."""
    token = bearer(conn)
    if token:
        return await gate.route(token, at.session_id, at.app)
    cookie = conn.cookies.get(origins.cookie_name(at))
    if not cookie:
        raise Unauthorized("enter the app from the console (or send `Authorization: Bearer "
                           "<token>`)")
    if writes:
        browser.check_origin(conn, [])
    return await gate.route(cookie, at.session_id, at.app, app_cookie=True)
