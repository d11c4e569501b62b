"""What the browser tests ask a page to do, the same in every one of them; where they find
Chromium and keep their screenshots."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waits import scaled

BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("GPUSLICE_ARTIFACTS", Path(__file__).parent / "artifacts"))

# An app page's script calling the manager's API with the browser's cookies: what an app's
# own origin must never be able to do. The page's answer: "status N: body" or "refused: …".
CALL_API_WITH_COOKIES = """async (api) => {
    try {
        const r = await fetch(api, {credentials: "include"});
        return "status " + r.status + ": " + await r.text();
    } catch (err) { return "refused: " + err; }
}"""


def until(check: Any, timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``check`` from here (the console's and the proxy's pages forbid the evaluation
    Playwright's wait_for_function uses) until it returns something true; ``timeout`` is
    scaled by GPUSLICE_TEST_TIMEOUT_SCALE."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        try:
            got = check()
        except Exception:  # not on the page yet
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.2)


# Chromium aborts what is in flight when the machine's network interfaces change (its bug
# 436086), and Docker adds and removes bridges and veths whenever a test starts or ends a
# session: a navigation then fails with this, through no fault of the page. Navigations are
# tried again (tests/conftest.py wraps Page.goto; the login form posts below); nothing else
# is, so an error of our own still fails the test.
NETWORK_CHANGED = "ERR_NETWORK_CHANGED"
ERROR_PAGE = "chrome-error://"
TRIES = 3


def network_changed(err: BaseException) -> bool:
    return NETWORK_CHANGED in str(err)


def post_login(page: Any, username: str, password: str, *, enter: bool = False) -> None:
    """Fill the login form on ``page`` and post it (by its button, or Enter), posting it again
    when Chromium aborted the post for a network change (its error page, then back)."""
    for attempt in range(TRIES):
        page.fill("#u", username)
        page.fill("#p", password)
        if enter:
            page.keyboard.press("Enter")
        else:
            page.click("button")
        page.wait_for_load_state()
        if not page.url.startswith(ERROR_PAGE) or attempt == TRIES - 1:
            return
        page.go_back()
        page.wait_for_selector("#u")


async def post_login_async(page: Any, username: str, password: str) -> None:
    """:func:`post_login` for Playwright's async API."""
    for attempt in range(TRIES):
        await page.fill("#u", username)
        await page.fill("#p", password)
        await page.click("button")
        await page.wait_for_load_state()
        if not page.url.startswith(ERROR_PAGE) or attempt == TRIES - 1:
            return
        await page.go_back()
        await page.wait_for_selector("#u")


def console_ready(page: Any, selector: str, timeout: float = 60.0) -> None:
    """Wait until the console shows ``selector``, reloading it (as a person would) when it
    does not within a third of ``timeout``, twice at most: a script or a call of the page
    aborted by a network change (see NETWORK_CHANGED) leaves it as it was, and nothing tries
    again. The last wait has the whole ``timeout``: a page that never shows it still fails."""
    for attempt in range(TRIES):
        last = attempt == TRIES - 1
        try:
            page.wait_for_selector(selector, timeout=scaled(timeout if last else timeout / 3)
                                   * 1000)
            return
        except Exception:
            if last:
                raise
            page.reload()


async def console_ready_async(page: Any, selector: str, timeout: float = 60.0) -> None:
    """:func:`console_ready` for Playwright's async API."""
    for attempt in range(TRIES):
        last = attempt == TRIES - 1
        try:
            await page.wait_for_selector(
                selector, timeout=scaled(timeout if last else timeout / 3) * 1000)
            return
        except Exception:
            if last:
                raise
            await page.reload()


def chromium() -> Iterator[Any]:
    """Chromium through Playwright's sync API, for a fixture to yield from (closed after); the
    tests skip, with the reason, where Playwright or Chromium is missing."""
    executable = next((b for b in BROWSERS if os.path.exists(b)), None)
    sync_api = pytest.importorskip("playwright.sync_api")
    if executable is None:
        pytest.skip("no Chromium (tools/host-setup.sh --browser installs it)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module that imports this fixture."""
    yield from chromium()


def log_in(page: Any, manager: str, password: str, shots: str) -> None:
    """Log ``page`` in to the console at ``manager`` as the admin, and wait until it shows the
    sessions; when it does not, a screenshot (``<shots>-login-failed.png``) and what it shows."""
    page.goto(manager + "/")
    post_login(page, "admin", password)
    try:
        console_ready(page, "#sessions")
    except Exception:  # say where the browser is and what it shows (a CI run timed out here)
        page.screenshot(path=str(ARTIFACTS / f"{shots}-login-failed.png"))
        raise AssertionError(f"no console after logging in: at {page.url}, showing "
                             f"{page.inner_text('body')[:600]!r}") from None
