"""Browsers log in with a cookie: HttpOnly, SameSite=Lax, bound to the login token and expiring
with it, accepted by the whole API; a write with it must come from the manager's own origin."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import IMAGE, client_for

ORIGIN = "http://manager"  # the test client's base URL: the manager's own origin


def password(settings: ManagerSettings) -> str:
    text = (settings.data_dir / "admin-credentials").read_text()
    return dict(line.split(": ", 1) for line in text.splitlines())["password"]


@pytest.fixture
async def browser(app: FastAPI, settings: ManagerSettings) -> httpx.AsyncClient:
    """A client holding only the login cookie, as a browser after logging in."""
    async with client_for(app) as anon:
        r = await anon.post("/api/v1/auth/login",
                            json={"username": "admin", "password": password(settings)})
    assert r.status_code == 200
    client = client_for(app)
    client.cookies.set("gpuslice_login", r.cookies["gpuslice_login"])
    return client


async def test_login_sets_a_cookie_bound_to_the_login(
    anon: httpx.AsyncClient, settings: ManagerSettings
) -> None:
    r = await anon.post("/api/v1/auth/login",
                        json={"username": "admin", "password": password(settings)})
    header = r.headers["set-cookie"]
    assert header.startswith(f"gpuslice_login={r.json()['access_token']};")
    assert "HttpOnly" in header and "SameSite=lax" in header and "Path=/" in header
    expires = datetime.fromisoformat(r.json()["expires_at"]).replace(tzinfo=UTC)
    max_age = int(header.split("Max-Age=")[1].split(";")[0])
    ttl = settings.auth.login_token_ttl
    assert ttl - 5 <= max_age <= ttl
    assert abs((expires - datetime.now(UTC)).total_seconds() - max_age) < 5


async def test_the_api_takes_the_cookie_and_checks_the_origin_of_writes(
    browser: httpx.AsyncClient,
) -> None:
    assert (await browser.get("/api/v1/auth/me")).json()["username"] == "admin"
    body = {"image": IMAGE, "resources": {"cpu": 1}}
    for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Referer": "http://evil.example/page"}):
        r = await browser.post("/api/v1/sessions", json=body, headers=headers)
        assert r.status_code == 403 and r.json()["code"] == "origin_mismatch", headers
    assert (await browser.post("/api/v1/sessions", json=body,
                               headers={"Origin": ORIGIN})).status_code == 201
    assert (await browser.post("/api/v1/sessions", json=body,
                               headers={"Referer": f"{ORIGIN}/s/x/"})).status_code == 201


async def test_a_bearer_token_needs_no_origin(admin: httpx.AsyncClient) -> None:
    r = await admin.post("/api/v1/sessions", json={"image": IMAGE},
                         headers={"Origin": "http://evil.example"})
    assert r.status_code == 201  # no cookie: nothing a foreign page could have sent


async def test_allowed_origins_may_write_too(browser: httpx.AsyncClient, app: FastAPI) -> None:
    app.state.settings.auth.allowed_origins = ["https://console.example:443"]
    r = await browser.post("/api/v1/sessions", json={"image": IMAGE},
                           headers={"Origin": "https://console.example"})
    assert r.status_code == 201


async def test_logout_ends_the_login_and_clears_the_cookie(browser: httpx.AsyncClient) -> None:
    token = browser.cookies["gpuslice_login"]
    r = await browser.post("/api/v1/auth/logout", headers={"Origin": ORIGIN})
    assert r.status_code == 204
    assert 'gpuslice_login=""' in r.headers["set-cookie"] or "Max-Age=0" in r.headers[
        "set-cookie"]
    browser.cookies.set("gpuslice_login", token)  # a copy kept elsewhere: revoked all the same
    assert (await browser.get("/api/v1/auth/me")).status_code == 401


async def test_the_login_page(anon: httpx.AsyncClient, settings: ManagerSettings) -> None:
    page = await anon.get("/login", params={"next": "/s/abc/jupyter/lab"})
    assert page.status_code == 200 and 'value="/s/abc/jupyter/lab"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    form = {"username": "admin", "password": password(settings), "next": "/s/abc/jupyter/lab"}
    done = await anon.post("/login", data=form, headers={"Origin": ORIGIN})
    # an app's path goes on by a refresh (its origin is not this one: CSP form-action), the
    # rest by a redirect
    assert done.status_code == 200 and done.headers["refresh"] == "0; url=/s/abc/jupyter/lab"
    assert 'href="/s/abc/jupyter/lab"' in done.text
    assert "gpuslice_login=" in done.headers["set-cookie"]
    home = await anon.post("/login", data=form | {"next": "/sessions?x=1"},
                           headers={"Origin": ORIGIN})
    assert home.status_code == 303 and home.headers["location"] == "/sessions?x=1"
    elsewhere = await anon.post("/login", data=form | {"next": "//evil.example/"},
                                headers={"Origin": ORIGIN})
    assert elsewhere.headers["location"] == "/"  # never a redirect off this site
    wrong = await anon.post("/login", data=form | {"password": "nope"},
                            headers={"Origin": ORIGIN})
    assert wrong.status_code == 401 and "wrong username or password" in wrong.text
    forged = await anon.post("/login", data=form, headers={"Origin": "http://evil.example"})
    assert forged.status_code == 403 and "set-cookie" not in forged.headers
    # more fields than the form has was a 500 (parse_qs's ValueError) and a traceback
    crowded = await anon.post("/login", data=form | {f"x{i}": "1" for i in range(10)},
                              headers={"Origin": ORIGIN})
    assert crowded.status_code == 401 and "set-cookie" not in crowded.headers
