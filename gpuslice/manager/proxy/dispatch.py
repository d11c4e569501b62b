"""``/s/<session>/<app>/…`` is taken before the API's router.

Every request to an app passes here (a page loads dozens), and the API's router would first try
each of its routes against the path, then resolve a handler's dependencies: most of the
proxy's own work. This middleware sees the prefix, and hands HTTP requests and WebSockets to
the proxy (``serve``) at once; everything else goes on to the API unchanged. It sits inside the
app's error handling, so an unexpected failure is still the one ``internal_error`` answer.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpuslice.manager.proxy import serve

PREFIX = "/s/"
_PATH = re.compile(r"^/s/(?P<session>[^/]{1,64})/(?P<app>[a-z][a-z0-9-]{0,31})(?P<rest>/.*)?$",
                   re.DOTALL)


class ProxyDispatch:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        found = _PATH.match(scope["path"]) if kind in ("http", "websocket") else None
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
            response = await serve.serve_http(request, session, app)
        await response(scope, receive, send)
