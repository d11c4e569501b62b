"""A person not yet logged in opens an app's link (a bookmark, a link a colleague sent): the
manager's login page, then the app at its own origin, in Chromium. The login form may only
post to the manager (CSP ``form-action 'self'``), and Chromium holds a form's redirects to
that rule too, so the way on to the app's origin must not be a redirect of the form's post."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.browser import post_login_async
from tests.manager.conftest import ARTIFACTS
from tests.manager.fake_agent import FakeAgent
from tests.manager.proxy_helpers import admin_password, node, running, url  # noqa: F401
from tests.waits import scaled


@pytest.fixture
async def agent(app: FastAPI, admin: httpx.AsyncClient, url: str) -> AsyncIterator[FakeAgent]:  # noqa: F811
    running_agent = await node(app, admin, url)
    yield running_agent
    await running_agent.stop()


async def test_the_login_page_leads_on_to_the_app_at_its_own_origin(
    app: FastAPI, url: str, admin: httpx.AsyncClient, agent: FakeAgent, browser: Any,  # noqa: F811
) -> None:
    sid = await running(admin)
    port = url.rsplit(":", 1)[1]
    page = await browser.new_page()
    await page.goto(f"http://localhost:{port}/s/{sid}/echo/headers?from=link")
    await page.wait_for_url(f"http://localhost:{port}/login?**", timeout=scaled(30) * 1000)
    await post_login_async(page, "admin", admin_password(app))
    origin = f"http://echo--{sid}.apps.localhost:{port}"
    try:
        await page.wait_for_url(f"{origin}/headers?from=link", timeout=scaled(30) * 1000)
    except Exception:  # where it stopped, and what it showed
        body = (await page.inner_text("body"))[:500]
        raise AssertionError(f"at {page.url}: {body}") from None
    await page.screenshot(path=str(ARTIFACTS / "app-after-login.png"))
    assert '"target":"/headers?from=link"' in (await page.inner_text("body")).replace(" ", "")
    # the app got none of our cookies, and the login cookie stayed on the manager's origin
    assert "Cookie" not in dict(agent.opened[-1]["headers"])
    cookies = {c["name"]: c["domain"] for c in await page.context.cookies()}
    assert cookies == {"gpuslice_login": "localhost",
                       "gpuslice_app": f"echo--{sid}.apps.localhost"}
