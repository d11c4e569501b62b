"""What the web console's tests in Chromium share: fixtures, imported into a test module
(``plat``: one `gpuslice up` per module; ``browser``: its Chromium; ``users``: alice and bob,
with ``PASSWORD``), and what a person does on a console page (log in, read the sessions' rows,
launch from the dialog), a screenshot (``console-<name>.png`` in ``GPUSLICE_ARTIFACTS``),
every session ended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuslice.client import Client
from tests.browser import ARTIFACTS, chromium, console_ready, post_login
from tests.platform.conftest import Platform, run_up
from tests.waits import scaled

BASE = "gpuslice/base:0.1.0"
PASSWORD = "console-pass-1"


@pytest.fixture(scope="module")
def plat(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("console"))


@pytest.fixture(scope="module")
def browser(plat: Platform) -> Iterator[Any]:
    """One Chromium for the module, started once its platform is up."""
    print(f"console screenshots in {ARTIFACTS}")
    yield from chromium()


@pytest.fixture(scope="module")
def users(plat: Platform) -> dict[str, Client]:
    admin = plat.client()
    made = {}
    for name in ("alice", "bob"):
        admin.create_user(name, PASSWORD)
        made[name] = Client(plat.url)
        made[name].login(name, PASSWORD)
    return made


def open_console(plat: Platform, browser: Any, username: str, password: str = PASSWORD) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # "Destroy …?"
    page.goto(plat.url + "/")
    assert "/login" in page.url  # no login yet: the form first
    post_login(page, username, password)
    try:  # the login's password hash runs at the lowest CPU priority: a loaded machine waits
        console_ready(page, "#sessions")
    except Exception:
        shot(page, f"open-console-{username}-failed")
        raise AssertionError(f"{username}'s console never showed the sessions at {page.url}: "
                             f"{page.inner_text('body')[:500]!r}") from None
    return page


def rows(page: Any) -> list[dict[str, str]]:
    found = []
    for tr in page.query_selector_all("#session-rows tr"):
        cells = tr.query_selector_all("td")
        found.append({"id": tr.get_attribute("data-id"), "name": tr.get_attribute("data-name"),
                      "status": tr.get_attribute("data-status"),
                      "reason": cells[2].inner_text(), "config": cells[3].inner_text()})
    return found


def launch(page: Any, image: str, **fields: str) -> None:
    page.click("#launch")
    page.wait_for_selector("#launch-dialog")
    repository = image.rsplit(":", 1)[0]
    if page.locator(f'#launch-env option[value="{repository}"]').count():
        page.select_option("#launch-env", repository)
        page.select_option("#launch-version", image)
    else:  # not offered (a test image): typed, as a user names any image they may use
        page.fill("#launch-image", image)
    for key, value in fields.items():
        if key == "type":
            page.check(f"#launch-type-{value}")
        else:
            page.fill(f"#launch-{key}", value)
    page.click("#launch-submit")


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"))


def destroy_all(client: Client) -> None:
    live = [s.id for s in client.list_all_sessions(
        status=["PENDING", "SCHEDULED", "PREPARING", "RUNNING"])]
    if live:
        client.destroy_sessions(live)
    for sid in live:
        client.wait(sid, {"TERMINATED", "CANCELLED", "ERROR"}, timeout=scaled(60))
