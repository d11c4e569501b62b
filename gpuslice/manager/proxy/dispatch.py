"""Apps' origins, and ``/s/<session>/<app>/…``, are taken before the API's router.

Every request to an app passes here (a page loads dozens), and the API's router would first try
each of its routes against the path, then resolve a handler's dependencies: most of the
proxy's own work. This middleware looks at the ``Host`` first: a request for an app's origin
(``<app>--<session>.<apps.domain>``) is the app's, whatever its path, and never reaches the
API or the console; so is any request on an app's own port (``apps.port_range``,
``ports.py``). On the manager's own origin it takes the ``/s/`` prefix (the terminal's
page, and the way into an app's origin); everything else goes on to the API unchanged. It sits
inside the app's error handling, so an unexpected failure is still the one ``internal_error``
answer.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpuslice.manager.api.errors import deny
from gpuslice.manager.errors import NotFound
from gpuslice.manager.proxy import pages, ports, serve
from gpuslice.manager.services.apps import origins

PREFIX = "/s/"
_PATH = re.compile(r"^/s/(?P<session>[^/]{1,64})/(?P<app>[a-z0-9][a-z0-9-]{0,31})(?P<rest>/.*)?$",
                   re.DOTALL)


class ProxyDispatch:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.domain: str | None = None  # apps.domain, read once the app's state has settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if ports.SCOPE_KEY in scope:  # an app's port (apps.port_range): all of it is the app's
            await self._port_app(scope, receive, send, scope[ports.SCOPE_KEY])
            return
        at = self._origin(scope)
        if at is not None:
            await self._origin_app(scope, receive, send, at)
            return
        found = _PATH.match(scope["path"])
        if found is None:  # not an app's path (a malformed one: the API's 404)
            await self.app(scope, receive, send)
            return
        session, app = found["session"], found["app"]
        if kind == "websocket":
            await serve.serve_app_socket(WebSocket(scope, receive, send), session, app)
            return
        request = Request(scope, receive)
        response: Response
        if found["rest"] is None:  # relative links need the slash
            query = f"?{request.url.query}" if request.url.query else ""
            response = RedirectResponse(f"{PREFIX}{session}/{app}/{query}", status_code=307)
        else:
            response = await serve.serve_http(request, session, app, found["rest"])
        await response(scope, receive, send)

    def _origin(self, scope: Scope) -> origins.AppOrigin | None:
        if self.domain is None:
            self.domain = scope["app"].state.settings.apps.domain
        for key, value in scope["headers"]:
            if key == b"host":
                return origins.parse_host(value.decode("latin-1"), self.domain)
        return None

    async def _port_app(self, scope: Scope, receive: Receive, send: Send, port: int) -> None:
        registry: ports.AppPorts | None = getattr(scope["app"].state, "app_ports", None)
        at = registry.at(port) if registry is not None else None
        if at is None:  # closed as its session ended, a request already on its way
            gone = NotFound(f"no app is served on port {port} any more: open it again from "
                            "the console", code="unknown_app")
            if scope["type"] == "websocket":
                await deny(WebSocket(scope, receive, send), gone)
                return
            await pages.error(Request(scope, receive), 404, gone.code, gone.message)(
                scope, receive, send)
            return
        await self._origin_app(scope, receive, send, at)

    async def _origin_app(self, scope: Scope, receive: Receive, send: Send,
                          at: origins.AppOrigin) -> None:
        if scope["type"] == "websocket":
            await serve.serve_origin_socket(WebSocket(scope, receive, send), at)
            return
        response = await serve.serve_origin_http(Request(scope, receive), at)
        await response(scope, receive, send)
