"""Serving the manager with uvicorn, with a shutdown that does not wait on long-polls."""

from __future__ import annotations

import asyncio
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from gpuslice.manager.settings import AppsSettings, ServerSettings

# After the hub is closed, requests still open get this long to finish before uvicorn
# cancels them.
GRACEFUL_SHUTDOWN_S = 5


class ManagerServer(uvicorn.Server):
    """uvicorn that tells the app's long-polls and event streams to finish when asked to exit.

    With ``server.tls_cert``/``tls_key`` it serves HTTPS; X-Forwarded-For/-Proto are believed
    only from ``server.trusted_proxies`` (login throttling counts by the client's address, which
    a direct client must not be able to choose)."""

    def __init__(
        self, app: FastAPI, host: str, port: int, server: ServerSettings | None = None
    ) -> None:
        server = server or ServerSettings()
        super().__init__(uvicorn.Config(app, host=host, port=port, **options(
            app.state.settings.apps, server)))
        # where app ports (apps.port_range) listen too, and where their browsers log in
        app.state.bind_host, app.state.manager_port = host, port
        self.app = app
        self.scheme = "https" if self.config.is_ssl else "http"

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.close_streams()
        super().handle_exit(sig, frame)

    def close_streams(self) -> None:
        hub = getattr(self.app.state, "hub", None)
        if hub is not None:
            try:
                asyncio.get_running_loop().call_soon_threadsafe(hub.close)
            except RuntimeError:  # no loop running (not started yet): nothing is open
                pass

    def exit(self) -> None:
        """Begin a graceful shutdown from inside the event loop."""
        self.close_streams()
        self.should_exit = True


def options(apps: AppsSettings, server: ServerSettings) -> dict[str, Any]:
    """uvicorn's settings for the manager's port, and for apps' ports (``proxy/ports.py``)."""
    tls: dict[str, str] = {}
    if server.tls_cert is not None and server.tls_key is not None:
        tls = {"ssl_certfile": str(server.tls_cert), "ssl_keyfile": str(server.tls_key)}
    proxies = list(server.trusted_proxies)
    return dict(
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        # Terminals, notebooks and agents' links: pinged so that idle ones stay open
        # through proxies that drop quiet connections; messages as big as apps send; no
        # compression (the proxy passes messages on: compressing each hop costs more CPU
        # than it saves on a LAN).
        ws_ping_interval=apps.ping_interval, ws_ping_timeout=apps.ping_timeout,
        ws_max_size=apps.max_message, ws_per_message_deflate=False,
        # the process's own logging (one line per event, text or JSON) carries uvicorn's
        log_config=None,
        **tls,
    )
