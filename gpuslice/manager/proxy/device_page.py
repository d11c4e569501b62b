"""``/device``: where a signed-in user approves (or denies) a CLI's device sign-in, after seeing
which host, OS user and address ask. Server-rendered, no script; the decision is a form post
with the login cookie and an ``Origin`` check (login CSRF)."""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import status_of
from gpuslice.manager.db.models import ApiTokenRow, UserRow
from gpuslice.manager.errors import DomainError
from gpuslice.manager.proxy import pages
from gpuslice.manager.proxy.routes import read_form
from gpuslice.manager.services import auth
from gpuslice.manager.services.sso import device

router = APIRouter(include_in_schema=False)
Code = Annotated[str, Query(max_length=32)]


@router.get("/device")
async def device_page(request: Request, code: Code = "") -> Response:
    """The code field, or the request it names with Approve and Deny."""
    if not request.app.state.settings.auth.device_login:
        return pages.error(request, 404, "device_login_off",
                           "device sign-in is off on this manager (auth.device_login)")
    here = "/device" + (f"?code={quote(code, safe='')}" if code else "")
    try:
        async with request.app.state.sessionmaker() as db:
            await signed_in(request, db)
            if not code:
                return _ask_code()
            shown = await device.pending(db, code)
    except NotSignedIn:
        return RedirectResponse(f"/login?next={quote(here, safe='')}", status_code=303)
    except DomainError as err:
        return _ask_code(err.message, status_of(err))
    return _card(shown.user_code, shown.client_host, shown.os_user, shown.client_ip,
                 shown.age_seconds)


@router.post("/device")
async def device_decision(request: Request) -> Response:
    """Approve or Deny, from the page above."""
    form = await read_form(request)
    code, approve = form.get("user_code", ""), form.get("decision") == "approve"
    try:
        browser.check_origin(request, request.app.state.settings.auth.allowed_origins)
        async with request.app.state.sessionmaker() as db:
            user, token = await signed_in(request, db)
            address = request.client.host if request.client else None
            shown = await device.decide(db, user, token, code, approve, address,
                                        request.app.state.login_throttle, page=True)
    except NotSignedIn:
        return RedirectResponse("/login?next=%2Fdevice", status_code=303)
    except DomainError as err:
        return _ask_code(err.message, status_of(err))
    host = html.escape(shown.client_host)
    said = (f"The CLI on {host} is signed in as {html.escape(user.username)}. You can close "
            "this tab." if approve else f"The sign-in of the CLI on {host} was denied.")
    return pages.page("Device sign-in: gpuslice", f"<h1>Device sign-in</h1><p id=done>{said}</p>")


class NotSignedIn(Exception):
    """The browser has no valid login cookie: it goes to the login page first."""


async def signed_in(request: Request, db: object) -> tuple[UserRow, ApiTokenRow]:
    """The user and token of the browser's login cookie, else ``NotSignedIn``."""
    cookie = browser.login_cookie(request)
    if not cookie:
        raise NotSignedIn
    try:
        return await auth.authenticate(db, cookie)  # type: ignore[arg-type]
    except DomainError:
        raise NotSignedIn from None


def _ask_code(problem: str = "", status: int = 200) -> Response:
    warning = f"<p class=error>{html.escape(problem)}</p>" if problem else ""
    return pages.page("Device sign-in: gpuslice", (
        f"<h1>Sign in a device</h1>{warning}<form method=get action=/device>"
        "<label for=c>The code the CLI printed</label>"
        "<input id=c name=code autocomplete=off required autofocus>"
        "<p><button type=submit>Continue</button></p></form>"), status)


def _card(code: str, host: str, os_user: str, address: str | None, age: int) -> Response:
    rows = "".join(f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in (
        ("Code", code), ("Host", host), ("OS user", os_user), ("Address", address or "?"),
        ("Asked", f"{age} s ago")))
    hidden = f"<input type=hidden name=user_code value=\"{html.escape(code, quote=True)}\">"
    return pages.page("Device sign-in: gpuslice", (
        "<h1>Sign in the gpuslice CLI?</h1><p>Approve only if you ran <code>gpuslice login "
        "--device</code> yourself and this is that machine.</p>"
        f"<table>{rows}</table><form method=post action=/device>{hidden}"
        "<p><button type=submit name=decision value=approve>Approve</button> "
        "<button type=submit name=decision value=deny>Deny</button></p></form>"))
