"""The console's Admin → Audit page in real Chromium against the manager's test server
(issue 43): the log with the CLI's filters, and the chain's check."""

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


async def test_an_admin_filters_the_audit_log_and_checks_its_chain(
    app: FastAPI, url: str, admin: httpx.AsyncClient, browser: Any  # noqa: F811
) -> None:
    r = await admin.post("/api/v1/presets", json={"name": "audited", "cpu": 1, "mem": "1g"})
    assert r.status_code == 201, r.text
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    page = await browser.new_page()
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "admin", admin_password(app))
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await page.goto(f"{manager}/#/admin/audit")
    await console_ready_async(page, "#audit-table")
    actions = await page.locator("#audit-table td.action").all_inner_texts()
    assert "preset.create" in actions and "auth.login" in actions, actions
    await page.fill("#audit-action", "preset.*")
    await page.click("text=Filter")

    async def filtered() -> bool:
        shown = await page.locator("#audit-table td.action").all_inner_texts()
        return shown == ["preset.create"]

    await _until(filtered, "the rows of preset actions only")
    await page.select_option("#audit-outcome", "denied")
    await page.click("text=Filter")
    await page.wait_for_selector("text=No audit row matches.", timeout=scaled(30) * 1000)
    await page.click("text=Check the chain")
    await page.wait_for_selector("#audit-chain:has-text('Chain intact')",
                                 timeout=scaled(30) * 1000)
