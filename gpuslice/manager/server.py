"""Serving the manager with uvicorn, with a shutdown that does not wait on long-polls."""

from __future__ import annotations

import asyncio
from types import FrameType

import uvicorn
from fastapi import FastAPI

# After the hub is closed, requests still open get this long to finish before uvicorn
# cancels them.
GRACEFUL_SHUTDOWN_S = 5


class ManagerServer(uvicorn.Server):
    """uvicorn that tells the app's long-polls and event streams to finish when asked to exit."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        apps = app.state.settings.apps
        super().__init__(uvicorn.Config(
            app, host=host, port=port, log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            # Terminals, notebooks and agents' links: pinged so that idle ones stay open
            # through proxies that drop quiet connections; messages as big as apps send; no
            # compression (the proxy passes messages on: compressing each hop costs more CPU
            # than it saves on a LAN).
            ws_ping_interval=apps.ping_interval, ws_ping_timeout=apps.ping_timeout,
            ws_max_size=apps.max_message, ws_per_message_deflate=False,
            # the process's own logging (one line per event, text or JSON) carries uvicorn's
            log_config=None,
        ))
        self.app = app

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
