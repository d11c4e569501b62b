"""The console's project page in real Chromium against the manager's test server: the time
limits form takes back what it shows (no Docker, no agent: projects only)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from fastapi import FastAPI

from tests.browser import console_ready_async, post_login_async
from tests.manager.proxy_helpers import admin_password, settings, url  # noqa: F401
from tests.waits import scaled


async def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + scaled(30)
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_the_time_limits_form_takes_back_a_limit_it_shows(
    app: FastAPI, url: str, admin: httpx.AsyncClient, browser: Any  # noqa: F811
) -> None:
    """A default of 90 minutes is shown as 1h30m; setting only the maximum sends the default
    along as the form shows it, and that must not be refused."""
    r = await admin.post("/api/v1/projects", json={"name": "vision", "max_gpu": 1,
                                                   "default_time_limit": "90m"})
    assert r.status_code == 201, r.text
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    page = await browser.new_page()
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "admin", admin_password(app))
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await page.goto(f"{manager}/#/admin/projects")
    await console_ready_async(page, "#limits-project")
    await page.select_option("#limits-project", "vision")
    row = '#projects tr[data-name="vision"]'
    assert await page.inner_text(f"{row} .default-time") == "1h30m"
    await page.fill("#limits-max", "1d")
    await page.click("text=Set time limits")

    async def set_or_refused() -> bool:
        return (await page.inner_text(f"{row} .max-time") == "1d"
                or bool(await page.inner_text("#err-limits")))

    await _until(set_or_refused, "the maximum set (or refused)")
    assert await page.inner_text("#err-limits") == ""
    project = (await admin.get("/api/v1/projects/vision")).json()
    assert (project["default_time_limit"], project["max_time_limit"]) == (5400, 86400)
