"""Projects in the console, in real Chromium (issue 32): an admin makes a project and adds a
member on the admin page; the member picks it in the launch dialog, which shows each resource
group's free capacity; the project's quota holds and the waiting session's reason names it.
Screenshots in ``tests/artifacts/``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuslice.client import Client
from tests.browser import until
from tests.platform.conftest import Platform
from tests.platform.console_helpers import (
    BASE,
    browser,
    destroy_all,
    open_console,
    plat,
    shot,
    users,
)
from tests.waits import scaled

pytestmark = pytest.mark.docker
__all__ = ["browser", "plat", "users"]


def test_an_admin_makes_a_project_and_its_member_launches_in_it(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    alice = users["alice"]
    admin = open_console(plat, browser, "admin", plat.admin_password())
    admin.goto(f"{plat.url}/#/admin/projects")
    admin.wait_for_selector("#new-project")
    admin.fill("#new-project", "vision")
    admin.fill("#new-project-gpu", "1")
    admin.fill("#new-project-groups", "default")
    admin.click("text=Create project")
    admin.wait_for_selector('#projects tr[data-name="vision"]')
    admin.select_option("#member-project", "vision")
    admin.fill("#new-member", "alice")
    admin.click("text=Add member")
    row = until(lambda: (t := admin.inner_text('#projects tr[data-name="vision"]'))
                and "alice" in t and t, 30, "alice in vision's row")
    assert "of 1 fGPU" in row and "default" in row, row
    assert "default" in admin.inner_text('#groups tr[data-name="default"]')
    shot(admin, "admin-projects")
    admin.fill("#new-project", "Bad Name")
    admin.click("text=Create project")
    until(lambda: "lowercase letters" in admin.inner_text("#err-project"), 30, "the name's rule")
    _time_limits_rename_and_delete(plat, admin)

    page = open_console(plat, browser, "alice")
    page.click("#launch")
    page.wait_for_selector("#launch-dialog")
    options = [o.inner_text() for o in page.query_selector_all("#launch-project option")]
    assert options == ["~alice (personal)", "vision"], options
    page.select_option("#launch-project", "vision")
    groups = [o.inner_text() for o in page.query_selector_all("#launch-group option")]
    assert groups[0] == "any group it may use" and groups[1].startswith("default — "), groups
    assert "free" in groups[1] and "Free now: default" in page.inner_text("#launch-groups")
    page.fill("#launch-image", BASE)
    page.fill("#launch-gpu", "1")
    page.fill("#launch-name", "team-one")
    shot(page, "launch-project")
    page.click("#launch-submit")
    page.wait_for_selector("#launch-dialog", state="detached")
    [first] = [s for s in alice.list_sessions().items if s.name == "team-one"]
    assert first.project == "vision"
    alice.wait(first.id, {"RUNNING"}, timeout=scaled(60))
    [more] = alice.create_sessions(image=BASE, gpu=0.5, name="team-two", project="vision")
    waiting = until(lambda: (s := alice.get_session(more.id)).wait_code == "quota" and s, 60,
                    "team-two waiting on the project's quota")
    assert waiting.status_reason == (
        "project vision: 1.0 of 1.0 fGPU in use; this session needs 0.5 fGPU more")
    until(lambda: "project vision" in page.inner_text("#session-rows"), 60, "the reason shown")
    shot(page, "project-quota-reason")
    destroy_all(alice)


def _time_limits_rename_and_delete(plat: Platform, admin: Any) -> None:
    """The admin sets vision's time limits (its quota and groups stay), is told a bad one in a
    line, renames a spare project and deletes it (the page accepts the confirmation)."""
    admin.select_option("#limits-project", "vision")
    admin.fill("#limits-default", "2h")
    admin.fill("#limits-max", "1d")
    admin.click("text=Set time limits")
    row = '#projects tr[data-name="vision"]'
    until(lambda: admin.inner_text(f"{row} .max-time") == "1d", 30, "vision's maximum time")
    assert admin.inner_text(f"{row} .default-time") == "2h"
    assert "of 1 fGPU" in admin.inner_text(row)  # PUT replaces all: the quota was sent along
    assert admin.input_value("#limits-default") == "2h"  # the form shows what is set
    shot(admin, "admin-project-time-limits")
    admin.fill("#limits-max", "1h")
    admin.click("text=Set time limits")
    until(lambda: "longer than the maximum" in admin.inner_text("#err-limits"), 30,
          "the default longer than the maximum refused")
    assert admin.inner_text(f"{row} .max-time") == "1d"
    admin.fill("#new-project", "spare")
    admin.click("text=Create project")
    admin.wait_for_selector('#projects tr[data-name="spare"]')
    admin.select_option("#rename-project", "spare")
    admin.fill("#rename-to", "old-spare")
    admin.click("text=Rename project")
    admin.wait_for_selector('#projects tr[data-name="old-spare"]')
    admin.click('[aria-label="Delete old-spare"]')
    admin.wait_for_selector('#projects tr[data-name="old-spare"]', state="detached")
    assert admin.query_selector('[aria-label="Delete ~admin"]') is None  # personal: no button
