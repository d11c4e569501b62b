"""``/auth/cli``: where a signed-in user allows `gpuslice login --sso` on their machine (its
loopback listener gets a one-minute code). Server-rendered, no script; Allow is a form post
with the login cookie and an ``Origin`` check; its answer navigates (a Refresh, not a
redirect of the post: Chromium holds a form post's redirect to CSP form-action) to
``http://127.0.0.1:<port>/callback``, built from the integer port only."""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import status_of
from gpuslice.manager.errors import DomainError
from gpuslice.manager.proxy import pages
from gpuslice.manager.proxy.device_page import NotSignedIn, signed_in
from gpuslice.manager.proxy.routes import read_form
from gpuslice.manager.services.sso import loopback

router = APIRouter(include_in_schema=False)
Part = Annotated[str, Query(max_length=255)]


@router.get("/auth/cli")
async def cli_page(request: Request, port: Part = "", state: Part = "",
                   code_challenge: Part = "", host: Part = "") -> Response:
    """Allow or Cancel the CLI's sign-in (the login page first when not signed in)."""
    try:
        loopback.check_request(port, state, code_challenge)
        async with request.app.state.sessionmaker() as db:
            user, _ = await signed_in(request, db)
    except NotSignedIn:
        here = "/auth/cli?" + urlencode({"port": port, "state": state,
                                         "code_challenge": code_challenge, "host": host})
        return RedirectResponse("/login?" + urlencode({"next": here}), status_code=303)
    except DomainError as err:
        return pages.error(request, status_of(err), err.code, err.message)
    address = request.client.host if request.client else "?"
    hidden = "".join(f"<input type=hidden name={k} value=\"{html.escape(v, quote=True)}\">"
                     for k, v in (("port", port), ("state", state),
                                  ("code_challenge", code_challenge), ("host", host)))
    return pages.page("CLI sign-in: gpuslice", (
        f"<h1>Sign in the gpuslice CLI?</h1><p>Sign in the gpuslice CLI on a machine that says "
        f"it is <b>{html.escape(_shown(host))}</b>, from your browser's address "
        f"{html.escape(address)}, as <b>{html.escape(user.username)}</b>?</p>"
        f"<form method=post action=/auth/cli/allow>{hidden}"
        "<p><button type=submit name=decision value=allow>Allow</button> "
        "<button type=submit name=decision value=cancel>Cancel</button></p></form>"))


@router.post("/auth/cli/allow")
async def cli_allow(request: Request) -> Response:
    """Allow: on to the CLI's listener with a code; Cancel: a page saying so."""
    form = await read_form(request)
    try:
        browser.check_origin(request, request.app.state.settings.auth.allowed_origins)
        port = loopback.check_request(form.get("port", ""), form.get("state", ""),
                                      form.get("code_challenge", ""))
        async with request.app.state.sessionmaker() as db:
            user, token = await signed_in(request, db)
            if form.get("decision") != "allow":
                return pages.page("CLI sign-in: gpuslice", "<h1>Cancelled</h1><p>The CLI was "
                                  "not signed in. You can close this tab.</p>")
            code = await loopback.allow(db, user, token, form["code_challenge"],
                                        _shown(form.get("host", "")))
    except NotSignedIn:
        return RedirectResponse("/login", status_code=303)
    except DomainError as err:
        return pages.error(request, status_of(err), err.code, err.message)
    target = f"http://127.0.0.1:{port}/callback?" + urlencode(
        {"code": code, "state": form["state"]})
    response = pages.page("CLI sign-in: gpuslice", (
        f"<h1>Signing in the CLI</h1><p><a href=\"{html.escape(target, quote=True)}\">"
        "Continue</a></p>"))
    response.headers["Refresh"] = f"0; url={target}"
    return response


def _shown(text: str) -> str:
    return "".join(c if c.isprintable() else "\ufffd" for c in text[:255]) or "(unnamed)"
