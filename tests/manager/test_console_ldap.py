"""The web console's login page in real Chromium with an LDAP directory (issue 42): alice
signs in with her directory password on the same form as everyone, and a wrong one is one
line on the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from gpuslice.manager.settings import ManagerSettings
from tests.browser import ARTIFACTS, console_ready_async, post_login_async
from tests.idp.ldap import Directory as SlapdDirectory
from tests.manager.ldap_helpers import manager_settings
from tests.manager.proxy_helpers import (
    admin_password,
    url,  # noqa: F401 - the app served on a port
)
from tests.waits import scaled

pytestmark = pytest.mark.loops_off("ldap_recheck")


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str,
             ldap_directory: SlapdDirectory) -> ManagerSettings:
    return manager_settings(tmp_path, migrated_database_url, ldap_directory)


async def test_alice_signs_in_on_the_console_with_her_directory_password(
        app: FastAPI, url: str, browser: Any, ldap_directory: SlapdDirectory,  # noqa: F811
) -> None:
    manager = f"http://localhost:{url.rsplit(':', 1)[1]}"
    page = await browser.new_page()
    await page.goto(f"{manager}/login?next=/")
    await post_login_async(page, "alice", "not-her-password")
    await page.wait_for_selector("text=wrong username or password",
                                 timeout=scaled(30) * 1000)
    await post_login_async(page, "alice", "alice-password")
    await page.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await console_ready_async(page, "#who:has-text('alice')")
    # the admin's Users page says where each user signs in
    admin = await browser.new_page()
    await admin.goto(f"{manager}/login?next=/")
    await post_login_async(admin, "admin", admin_password(app))
    await admin.wait_for_url(f"{manager}/", timeout=scaled(60) * 1000)
    await admin.goto(f"{manager}/#/admin/users")
    await console_ready_async(admin, "#users td:has-text('alice')")
    rows = {cells[0]: cells for cells in [
        await row.locator("td").all_inner_texts()
        for row in await admin.locator("#users tbody tr").all()]}
    assert rows["alice"][2] == "the directory" and rows["admin"][2] == "a password", rows
    await admin.screenshot(path=str(ARTIFACTS / "console-users-sources.png"))
