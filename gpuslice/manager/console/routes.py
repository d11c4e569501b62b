"""The console's one page (``/``) and its files (``/console/…``).

The page is the same for everyone: what it shows comes from ``/api/v1`` with the login cookie,
so it holds nothing a person may not see. Without a login cookie, ``/`` sends the browser to the
login form first (an expired one is found by the page's first API call, which does the same).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from starlette.responses import FileResponse, RedirectResponse, Response

from gpuslice.manager.api import browser
from gpuslice.manager.errors import Unauthorized
from gpuslice.manager.proxy import pages

STATIC = Path(__file__).with_name("static")
router = APIRouter(include_in_schema=False)


def csp(host: str) -> str:
    """Nothing but this manager: scripts, styles, data and the terminal's WebSocket. Inline
    styles are allowed for the terminal emulator, which sizes its cells with them; never
    inline scripts."""
    return (f"default-src 'self'; connect-src 'self' ws://{host} wss://{host}; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@router.get("/")
async def console(request: Request) -> Response:
    """The console (after the login form when the browser has no login)."""
    try:
        if browser.login_cookie(request) is None:
            return RedirectResponse("/login?next=/", status_code=303)
    except Unauthorized as err:  # two login cookies: logging in again would not help
        return pages.error(request, 401, err.code, err.message)
    return FileResponse(STATIC / "index.html", headers={
        "Content-Security-Policy": csp(request.headers.get("host", "")),
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    })
