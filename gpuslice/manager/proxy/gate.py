"""Who is asking, for the proxy: a bearer token (the CLI, scripts) or the login cookie (a
browser, which must then come from our origin to write or open a WebSocket)."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from gpuslice.manager.api import browser
from gpuslice.manager.errors import Unauthorized
from gpuslice.manager.services.apps.access import AppRoute, Gate
from gpuslice.manager.settings import ManagerSettings


def credentials(conn: HTTPConnection) -> tuple[str, bool]:
    """The caller's secret, and whether it came as the login cookie."""
    kind, _, value = conn.headers.get("authorization", "").partition(" ")
    if kind.lower() == "bearer" and value.strip():
        return value.strip(), False
    cookie = browser.login_cookie(conn)
    if cookie:
        return cookie, True
    raise Unauthorized("log in first (the /login page, or `Authorization: Bearer <token>`)")


async def authorize(conn: HTTPConnection, gate: Gate, settings: ManagerSettings,
                    session_id: str, app: str, *, writes: bool) -> AppRoute:
    """The app's route for the caller, or the domain error that says why not. ``writes``: a
    request that changes something, or a WebSocket (the Origin check applies to cookies)."""
    secret, by_cookie = credentials(conn)
    if by_cookie and writes:
        browser.check_origin(conn, settings.auth.allowed_origins)
    return await gate.route(secret, session_id, app)
