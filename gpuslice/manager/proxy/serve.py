"""The proxy's entry points: who asks, where the app is, then the relay; every refusal is an
HTTP answer (a page for browsers, JSON for programs; on a WebSocket, the upgrade's answer)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response
from starlette.websockets import WebSocket

from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import deny, status_of
from gpuslice.manager.errors import DomainError, NotFound, Unauthorized
from gpuslice.manager.proxy import http, pages, sockets
from gpuslice.manager.proxy.gate import authorize
from gpuslice.manager.services.apps.access import Gate
from gpuslice.manager.services.apps.links import LinkPool
from gpuslice.manager.services.apps.traffic import ActivityMeter
from gpuslice.manager.settings import ManagerSettings


class _Parts:
    """What the proxy uses, from the app's state (made in its lifespan)."""

    def __init__(self, conn: HTTPConnection) -> None:
        state = conn.app.state
        self.gate: Gate = state.gate
        self.pool: LinkPool = state.links
        self.meter: ActivityMeter = state.activity
        self.settings: ManagerSettings = state.settings


async def serve_http(request: Request, session_id: str, app: str) -> Response:
    """An HTTP request for ``/s/<session>/<app>/…``."""
    parts = _Parts(request)
    try:
        route = await authorize(request, parts.gate, parts.settings, session_id, app,
                                writes=request.method not in browser.SAFE_METHODS)
        if route.launch is None:  # the terminal: its page (its stream is a WebSocket)
            return pages.terminal(request, route.session_id, route.session_name)
        return await http.relay(request, route, parts.pool, parts.meter)
    except Unauthorized as err:
        if request.method == "GET" and pages.wants_html(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        return pages.error(request, 401, err.code, err.message)
    except DomainError as err:
        return pages.error(request, status_of(err), err.code, err.message)


async def serve_app_socket(ws: WebSocket, session_id: str, app: str) -> None:
    """A WebSocket for ``/s/<session>/<app>/…``."""
    parts = _Parts(ws)
    try:
        route = await authorize(ws, parts.gate, parts.settings, session_id, app, writes=True)
        if route.launch is None:
            raise NotFound(f"the terminal's WebSocket is /api/v1/sessions/{session_id}/terminal",
                           code="unknown_app")
        link, subprotocol = await sockets.open_app_socket(ws, route, parts.pool)
    except DomainError as err:
        await deny(ws, err)
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
