"""Single sign-on for browsers (identity.md §6.1, §6.4): ``/auth/oidc/start`` sends the browser
to the provider with a binder cookie, ``/auth/oidc/callback`` signs it in (the login cookie, as
``/login`` sets it), and the provider's back-channel logout ends sessions. The logic is
``services/sso``'s; a manager without ``auth.oidc`` answers 404 here."""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from gpuslice.manager.api import browser
from gpuslice.manager.proxy import pages
from gpuslice.manager.proxy.routes import NextPath, local_path, sso_link

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
BINDER = "gpuslice_sso"
_BINDER_PATH = "/auth/oidc/"
_PARAMS = ("code", "state", "iss", "error", "error_description", "session_state")
_FORM_MAX = 32 * 1024
Param = Annotated[str | None, Query(max_length=4096)]


@router.get("/auth/oidc/start")
async def sso_start(request: Request, next_: NextPath = "/") -> Response:
    """Off to the provider's sign-in; it comes back to ``/auth/oidc/callback``."""
    sso = request.app.state.sso
    if sso is None:
        return _not_configured(request)
    from gpuslice.manager.services.sso import logins
    from gpuslice.manager.services.sso.provider import ProviderError

    public = sso.auth.public_url.rstrip("/")
    if public and browser.normalize(browser.own_origin(request)) != browser.normalize(public):
        # the binder cookie must be set on the host the provider sends the browser back to
        query = urlencode({"next": local_path(next_)})
        return RedirectResponse(f"{public}/auth/oidc/start?{query}", status_code=303)
    address = request.client.host if request.client else None
    try:
        async with request.app.state.sessionmaker() as db:
            url, binder = await logins.start(db, sso, local_path(next_), address)
    except ProviderError as err:
        log.warning("SSO start failed: %s", err.message)
        return pages.login(local_path(next_), f"single sign-on is unavailable: {err.message}",
                           502, sso=sso_link(request))
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(BINDER, binder, max_age=int(logins.LOGIN_TTL.total_seconds()),
                        path=_BINDER_PATH, httponly=True, samesite="lax",
                        secure=browser.scheme(request) == "https")
    return response


@router.get("/auth/oidc/callback")
async def sso_callback(request: Request, code: Param = None, state: Param = None) -> Response:
    """The provider's redirect back: the login cookie and on to where the sign-in started, or
    the login page with one line saying why not."""
    sso = request.app.state.sso
    if sso is None:
        return _not_configured(request)
    from gpuslice.manager.services.sso import logins

    params = {k: v[:4096] for k in _PARAMS if (v := request.query_params.get(k)) is not None}
    try:
        done = await logins.callback(request.app.state.sessionmaker, sso, params,
                                     request.cookies.get(BINDER))
    except logins.SignInFailed as err:
        response = pages.login("/", err.message, err.status, sso=sso_link(request))
        response.delete_cookie(BINDER, path=_BINDER_PATH)
        return response
    response = (pages.onwards(done.next_path) if done.next_path.startswith("/s/")
                else RedirectResponse(done.next_path, status_code=303))
    browser.set_login_cookie(response, request, done.token, done.row.expires_at)
    response.delete_cookie(BINDER, path=_BINDER_PATH)
    return response


@router.post("/auth/oidc/backchannel-logout")
async def sso_backchannel_logout(request: Request) -> Response:
    """The provider's back-channel logout (OpenID Back-Channel Logout 1.0): the logout token
    is the credential; the sessions it names end with every token made from them."""
    sso = request.app.state.sso
    if sso is None:
        return _not_configured(request)
    from gpuslice.manager.services.sso import sessions
    from gpuslice.manager.services.sso.provider import ProviderError

    headers = {"Cache-Control": "no-store"}
    try:
        claims = await sso.provider.verify_logout_token(await _logout_token(request))
        async with request.app.state.sessionmaker() as db:
            await sessions.backchannel_logout(db, claims, sso.settings.clock_leeway)
    except ProviderError as err:
        log.info("back-channel logout refused: %s", err.message)
        return JSONResponse({"error": "invalid_request", "error_description": err.message},
                            status_code=400, headers=headers)
    return Response(status_code=200, headers=headers)


async def _logout_token(request: Request) -> str:
    from gpuslice.manager.services.sso.provider import ProviderError

    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _FORM_MAX:
            raise ProviderError("the logout request is too large", code="too_large")
    try:
        token = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10).get("logout_token")
    except ValueError:
        token = None
    if not token:
        raise ProviderError("the logout request has no logout_token", code="token_invalid")
    return token[0]


def _not_configured(request: Request) -> Response:
    return pages.error(request, 404, "sso_not_configured",
                       "single sign-on is not configured on this manager (auth.oidc)")
