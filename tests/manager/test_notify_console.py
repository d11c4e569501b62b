"""The console's Notifications page in real Chromium (issue 43): a user adds a webhook to a
local receiver, sees its signing secret once, and Test shows the receiver's answer; a private
address is refused with the API's words."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.browser import ARTIFACTS, console_ready_async, post_login_async
from tests.manager.conftest import IMAGE, UserFactory
from tests.manager.notify_receivers import http_receiver
from tests.manager.proxy_helpers import url  # noqa: F401
from tests.waits import scaled


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": migrated_database_url},
        sessions={"allowed_images": [IMAGE]},
        notify={"allowed_targets": ["127.0.0.1/32"], "interval": 0.2},
    )


async def _until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + scaled(30)
    while not (got := await check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)
    return got


async def test_a_user_adds_a_webhook_and_tests_it_in_the_console(
    app: FastAPI, url: str, make_user: UserFactory, browser: Any,  # noqa: F811
) -> None:
    alice = await make_user("alice")
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    page = await browser.new_page()
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "alice", "password-alice")
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await page.goto(f"{manager}/#/notifications")
    await console_ready_async(page, "#notify-url")
    with http_receiver() as receiver:
        await page.fill("#notify-url", receiver.url)
        await page.uncheck("#notify-ev-started")
        await page.click("text=Add channel")
        secret = await _until(lambda: page.inner_text("#notify-secret-value"), "the secret")
        assert secret.startswith("whsec_")
        row = "#channels tbody tr"
        assert "/hook" not in await page.inner_text(row)  # the URL's path is not shown
        await page.click(f"{row} >> text=Test")

        async def answered() -> str:
            text = await page.inner_text(f"{row} .test-result")
            return text if text.startswith(("delivered", "not delivered")) else ""

        assert await _until(answered, "the test's answer") == "delivered: HTTP 200"
        [post] = await receiver.wait(1)
    assert json.loads(post.body)["type"] == "notify.test"
    [channel] = (await alice.get("/api/v1/notifications/channels")).json()
    assert "session.started" not in channel["events"]
    assert "session.finished" in channel["events"]
    assert secret not in json.dumps(channel)
    await page.fill("#notify-url", "https://10.1.2.3/hook")
    await page.click("text=Add channel")
    refused = await _until(lambda: page.inner_text("#err-notify"), "the refusal")
    assert "private" in refused and "notify.allowed_targets" in refused
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "console-notifications.png"), full_page=True)
