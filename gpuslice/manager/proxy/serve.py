"""The proxy's entry points: who asks, where the app is, then the relay; every refusal is an
HTTP answer (a page for browsers, JSON for programs; on a WebSocket, the upgrade's answer)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response
from starlette.websockets import WebSocket

from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import deny, status_of
from gpuslice.manager.errors import DomainError, NotFound, Unauthorized
from gpuslice.manager.proxy import gate, headers, http, pages, sockets
from gpuslice.manager.proxy.gate import authorize, authorize_at_origin
from gpuslice.manager.proxy.ports import AppPorts
from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.apps.access import AppRoute, Gate
from gpuslice.manager.services.apps.links import LinkPool
from gpuslice.manager.services.apps.origins import AppOrigin
from gpuslice.manager.services.apps.traffic import ActivityMeter
from gpuslice.manager.services.images.app_catalog import TERMINAL
from gpuslice.manager.settings import ManagerSettings

# The code is in the URL: kept out of caches and of the next page's Referer.
_PRIVATE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
# What the app before on a reused port left in the browser: its service workers, storage and
# cache (the origin's own; "cookies" would be the whole host's, the manager's login included).
_CLEAR = {"Clear-Site-Data": '"cache", "storage"'}


class _Parts:
    """What the proxy uses, from the app's state (made in its lifespan)."""

    def __init__(self, conn: HTTPConnection) -> None:
        state = conn.app.state
        self.gate: Gate = state.gate
        self.pool: LinkPool = state.links
        self.meter: ActivityMeter = state.activity
        self.settings: ManagerSettings = state.settings
        self.ports: AppPorts | None = getattr(state, "app_ports", None)  # apps.port_range

    async def origin(self, scheme: str, port: int | None, session_id: str, app: str) -> str:
        """The app's origin: its own port's with ``apps.port_range``, else by name."""
        if self.ports is not None:
            return self.ports.url(scheme, await self.ports.port_of(session_id, app))
        return origins.origin(scheme, port, session_id, app, self.settings.apps)


async def serve_http(request: Request, session_id: str, app: str, rest: str) -> Response:
    """An HTTP request for ``/s/<session>/<app>/…`` on the manager's origin: the terminal's
    page, or the way into an app's own origin (the login handed over by a single-use code)."""
    parts = _Parts(request)
    try:
        route = await authorize(request, parts.gate, parts.settings, session_id, app,
                                writes=request.method not in browser.SAFE_METHODS)
        if route.launch is None:  # the terminal: its page (its stream is a WebSocket)
            return pages.terminal(request, route.session_id, route.session_name)
        return await _into_origin(request, route, parts, rest)
    except Unauthorized as err:
        # (a second login cookie stays after a login: the form would only come back)
        if request.method == "GET" and pages.wants_html(request) and err.code != browser.TWICE:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        return pages.error(request, 401, err.code, err.message)
    except DomainError as err:
        return pages.error(request, status_of(err), err.code, err.message)


async def serve_app_socket(ws: WebSocket, session_id: str, app: str) -> None:
    """A WebSocket for ``/s/<session>/<app>/…`` on the manager's origin: apps' WebSockets are
    on their own origins now."""
    if app == TERMINAL:
        await deny(ws, NotFound(f"the terminal's WebSocket is /api/v1/sessions/{session_id}"
                                "/terminal", code="unknown_app"))
        return
    parts = _Parts(ws)
    if parts.ports is not None:  # a port is given to those the app is open to, over HTTP
        await deny(ws, NotFound(f"apps are served at their own origin: open /s/{session_id}/"
                                f"{app}/ for its URL", code="app_moved"))
        return
    url = origins.origin("https" if ws.url.scheme == "wss" else "http", ws.url.port,
                         session_id, app, parts.settings.apps)
    await deny(ws, NotFound(f"apps are served at their own origin: {url}/", code="app_moved"))


async def serve_origin_http(request: Request, at: AppOrigin) -> Response:
    """An HTTP request on an app's own origin: its entry (``/_gpuslice/enter``), else the
    app, at its root."""
    parts = _Parts(request)
    try:
        headers.target(request)  # a target that is not a path is refused first
        if request.url.path == origins.ENTER_PATH:
            return await _entered(request, at, parts)
        _not_terminal(at)
        route = await authorize_at_origin(request, parts.gate, at,
                                          writes=request.method not in browser.SAFE_METHODS)
        return await http.relay(request, route, parts.pool, parts.meter)
    except Unauthorized as err:
        if request.method == "GET" and pages.wants_html(request):  # enter by the manager
            on_port = at.port is not None and parts.ports is not None
            if on_port and not await _login_opens(request, parts.gate, at):
                # the way in names the session, which the port's URL does not: not to anyone
                return pages.error(request, 401, err.code, err.message)
            console = (parts.ports.console_url(browser.scheme(request))
                       if on_port and parts.ports is not None else
                       origins.console_url(browser.scheme(request), request.url.port,
                                           parts.settings.apps))
            return RedirectResponse(f"{console}/s/{at.session_id}/{at.app}"
                                    f"{headers.target(request)}", status_code=303)
        return pages.error(request, 401, err.code, err.message)
    except DomainError as err:
        err = _unnamed(err, at)
        return pages.error(request, status_of(err), err.code, err.message)


def _unnamed(err: DomainError, at: AppOrigin) -> DomainError:
    """An app port's URL names no session: one the caller may not see is not named to them
    (``no session <id>``) either."""
    if at.port is not None and isinstance(err, NotFound) and err.field == "session_id":
        return NotFound(f"no app of yours is served on port {at.port}", code="unknown_app")
    return err


async def _login_opens(request: Request, gate: Gate, at: AppOrigin) -> bool:
    """Whether the manager's login cookie the browser sent (a host's cookies go to all its
    ports) is one the app is open to."""
    try:
        login = browser.login_cookie(request)
        if not login:
            return False
        await gate.route(login, at.session_id, at.app)
    except DomainError:
        return False
    return True


async def serve_origin_socket(ws: WebSocket, at: AppOrigin) -> None:
    """A WebSocket on an app's own origin."""
    parts = _Parts(ws)
    try:
        _not_terminal(at)
        route = await authorize_at_origin(ws, parts.gate, at, writes=True)
        link, subprotocol = await sockets.open_app_socket(ws, route, parts.pool)
    except DomainError as err:
        await deny(ws, _unnamed(err, at))
        return
    await ws.accept(subprotocol=subprotocol)
    await sockets.relay(ws, link, parts.pool, parts.meter, route.session_id, terminal=False)


async def serve_terminal(ws: WebSocket, session_id: str, terminal: str | None, rows: int,
                         cols: int) -> None:
    """A terminal's WebSocket: the agent's ``attached`` message first (with the terminal's id,
    to reconnect with), then the shell's bytes."""
    parts = _Parts(ws)
    try:
        route = await authorize(ws, parts.gate, parts.settings, session_id, "terminal",
                                writes=True)
        link, attached = await sockets.open_terminal(
            parts.pool, route, terminal, rows, cols, parts.settings.apps.terminal_keep)
    except DomainError as err:
        await deny(ws, err)
        return
    await ws.accept()
    parts.meter.touch(route.session_id)
    await ws.send_text(attached.model_dump_json())
    await sockets.relay(ws, link, parts.pool, parts.meter, route.session_id, terminal=True)


async def _into_origin(request: Request, route: AppRoute, parts: _Parts, rest: str) -> Response:
    """A redirect to the app's origin; a browser's GET carries a fresh single-use code that
    hands its login over (a program sends its bearer token there itself)."""
    base = await parts.origin(browser.scheme(request), request.url.port, route.session_id,
                              route.app.name)
    target = rest + (f"?{request.url.query}" if request.url.query else "")
    if gate.bearer(request) is not None or request.method not in ("GET", "HEAD"):
        return RedirectResponse(base + target, status_code=307)
    async with request.app.state.sessionmaker() as db:
        code = await origins.mint_code(db, route.login_id, route.session_id, route.app.name,
                                       parts.settings.apps)
    query = urlencode({"code": code, "next": target})
    return RedirectResponse(f"{base}{origins.ENTER_PATH}?{query}", status_code=303,
                            headers=_PRIVATE)


async def _entered(request: Request, at: AppOrigin, parts: _Parts) -> Response:
    """The code traded for this origin's own cookie, then on to the page asked for."""
    name = origins.cookie_name(at)
    async with request.app.state.sessionmaker() as db:
        # An app port served another session's app before (ports are reused): a browser
        # that did not enter this one here yet may hold what that app left on the origin.
        reused = at.port is not None and not await origins.holds(db, request.cookies.get(name),
                                                                 at)
        cookie = await origins.redeem(db, request.query_params.get("code", ""), at)
    target = request.query_params.get("next", "/")
    if not target.startswith("/") or target.startswith(("//", "/\\")):
        target = "/"  # a path on this origin, never a redirect elsewhere
    response = RedirectResponse(target, status_code=303,
                                headers=_PRIVATE | (_CLEAR if reused else {}))
    # Host-only (no Domain): sent to this app's origin alone, never to another app or the
    # manager (on an app port, to every port of the host: named for its port, and good for
    # its app only); it lives as long as the browser, and no longer than the login on the server.
    response.set_cookie(name, cookie, path="/", httponly=True, samesite="lax",
                        secure=browser.scheme(request) == "https")
    return response


def _not_terminal(at: AppOrigin) -> None:
    if at.app == TERMINAL:
        raise NotFound(f"the terminal is the manager's page: /s/{at.session_id}/terminal/",
                       code="unknown_app")
