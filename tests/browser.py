"""What the browser tests ask a page to do, the same in every one of them."""

from __future__ import annotations

import time
from typing import Any

from tests.waits import scaled

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
