"""The login page for browsers (the apps under ``/s/<session>/<app>/`` are ``dispatch.py``'s)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs

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
async def login_page(next_: NextPath = "/") -> Response:
    """The login form; after it, the browser goes to ``next``."""
    return pages.login(_local(next_))


@router.post("/login")
async def login_form(request: Request) -> Response:
    """The login form's post: the login cookie, and on to ``next``."""
    form = await _form(request)
    next_path = _local(form.get("next", "/"))
    try:
        browser.check_origin(request, request.app.state.settings.auth.allowed_origins)
        address = request.client.host if request.client else None
        async with request.app.state.sessionmaker() as db:
            token, row = await auth.login(db, form.get("username", ""), form.get("password", ""),
                                          request.app.state.settings.auth.login_token_ttl,
                                          request.app.state.login_throttle, address,
                                          ldap.signer(request.app.state.settings.auth.ldap,
                                                      request.app.state.login_throttle.checks.run))
    except DomainError as err:
        return pages.login(next_path, err.message, status_of(err))
    # an app's path goes on to the app's own origin: not as the form post's redirect
    response = (pages.onwards(next_path) if next_path.startswith("/s/")
                else RedirectResponse(next_path, status_code=303))
    browser.set_login_cookie(response, request, token, row.expires_at)
    return response


def _local(target: str) -> str:
    """``target`` if it is a path on this site, else ``/`` (no redirect elsewhere)."""
    if target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/"


async def _form(request: Request) -> dict[str, str]:
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
