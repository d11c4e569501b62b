"""The login page for browsers (the apps under ``/s/<session>/<app>/`` are ``dispatch.py``'s)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import status_of
from gpuslice.manager.errors import DomainError
from gpuslice.manager.proxy import pages
from gpuslice.manager.services import auth
from gpuslice.manager.services.identity import ldap

router = APIRouter(include_in_schema=False)
_MAX_FORM = 16 * 1024


NextPath = Annotated[str, Query(alias="next", max_length=4096)]


@router.get("/login")
async def login_page(request: Request, next_: NextPath = "/", logged_out: str = "",
                     local: str = "") -> Response:
    """The login form (and the single sign-on link); after it, the browser goes to ``next``.
    With ``auth.oidc.auto_redirect`` straight on to the provider, unless ``local=1`` (the
    password form alone) or just signed out."""
    notice = "You are signed out of gpuslice." if logged_out else ""
    sso = None if local else sso_link(request)
    if sso is not None and request.app.state.settings.auth.oidc.auto_redirect and not logged_out:
        return RedirectResponse(f"{sso[1]}?next={quote(local_path(next_), safe='')}",
                                status_code=303)
    return pages.login(local_path(next_), sso=sso, notice=notice)


@router.post("/login")
async def login_form(request: Request) -> Response:
    """The login form's post: the login cookie, and on to ``next``."""
    form = await read_form(request)
    next_path = local_path(form.get("next", "/"))
    try:
        browser.check_origin(request, request.app.state.settings.auth.allowed_origins)
        address = request.client.host if request.client else None
        async with request.app.state.sessionmaker() as db:
            token, row = await auth.login(db, form.get("username", ""), form.get("password", ""),
                                          request.app.state.settings.auth.login_token_ttl,
                                          request.app.state.login_throttle, address,
                                          ldap.signer(request.app.state.settings.auth.ldap,
                                                      request.app.state.login_throttle.checks.run),
                                          request.app.state.settings.auth.password_login)
    except DomainError as err:
        return pages.login(next_path, err.message, status_of(err), sso=sso_link(request))
    # an app's path goes on to the app's own origin: not as the form post's redirect
    response = (pages.onwards(next_path) if next_path.startswith("/s/")
                else RedirectResponse(next_path, status_code=303))
    browser.set_login_cookie(response, request, token, row.expires_at)
    return response


def sso_link(request: Request) -> tuple[str, str] | None:
    """The single sign-on provider's name and start path, None without one."""
    if getattr(request.app.state, "sso", None) is None:
        return None
    return request.app.state.settings.auth.oidc.display_name, "/auth/oidc/start"


def local_path(target: str) -> str:
    """``target`` if it is a path on this site, else ``/`` (no redirect elsewhere)."""
    if any(ord(c) < 0x20 or c == "\x7f" for c in target):  # browsers drop tabs, newlines
        return "/"
    if target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/"


async def read_form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return {}
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    except ValueError:  # more fields than a login form has: as a form too big, no form
        return {}
    return {k: v[0] for k, v in fields.items()}
