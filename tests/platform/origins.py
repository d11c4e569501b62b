"""Reaching an app's own origin (``<app>--<session>.apps.localhost:<port>``) from tests.

Browsers and curl resolve ``*.localhost`` to this machine; Python's resolver does not, so
requests go to 127.0.0.1 and name the origin in ``Host``, as a browser's would.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import websockets.sync.client as ws_client

from tests.platform.conftest import Platform
from tests.waits import scaled


def host(plat: Platform, sid: str, app: str) -> str:
    return f"{app}--{sid}.apps.localhost:{plat.port}"


def url(plat: Platform, sid: str, app: str) -> str:
    """The app's URL as the platform names it."""
    return f"http://{host(plat, sid, app)}/"


def request(plat: Platform, method: str, sid: str, app: str, path: str,
            headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
    return httpx.request(method, f"{plat.url}{path}", timeout=scaled(60),
                         headers={**(headers or {}), "Host": host(plat, sid, app)}, **kw)


def enter(plat: Platform, sid: str, app: str, login_cookie: str) -> str:
    """A browser's way in: the manager's origin hands the login over by a single-use code,
    the app's origin trades it for its own cookie (returned)."""
    handed = httpx.get(f"{plat.url}/s/{sid}/{app}/", timeout=scaled(60), headers={
        "Cookie": f"gpuslice_login={login_cookie}", "Accept": "text/html"})
    assert handed.status_code == 303, handed.text
    target = httpx.URL(handed.headers["location"])
    assert f"{target.host}:{target.port}" == host(plat, sid, app)
    entered = request(plat, "GET", sid, app, f"{target.path}?{target.query.decode()}")
    assert entered.status_code == 303, entered.text
    return str(entered.cookies["gpuslice_app"])


def websocket(plat: Platform, sid: str, app: str, path: str,
              headers: dict[str, str]) -> ws_client.ClientConnection:
    """A WebSocket to the app's origin."""
    sock = socket.create_connection(("127.0.0.1", plat.port), timeout=scaled(60))
    return ws_client.connect(f"ws://{host(plat, sid, app)}{path}", sock=sock,
                             additional_headers=headers, max_size=None,
                             open_timeout=scaled(60))
