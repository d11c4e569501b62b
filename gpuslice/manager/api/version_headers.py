"""Every answer of the manager says which gpuslice it is (``gpuslice.common.versions``)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuslice.common.versions import headers


class VersionHeaders:
    """Pure ASGI middleware (no buffering, so streams pass as they are): adds the version and
    API revision headers to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.raw = [(k.lower().encode(), v.encode()) for k, v in headers().items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_version(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *self.raw]
            await send(message)

        await self.app(scope, receive, send_with_version)
