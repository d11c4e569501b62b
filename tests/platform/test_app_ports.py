"""One port per app (``apps.port_range``), as a user without ``*.localhost`` or a wildcard
domain has it: `gpuslice up` with the range set, a server started in a session, its port URL
in `gpuslice app list`, and the console's launcher link opened in Chromium at
``http://localhost:<port>/``. Screenshots go to ``GPUSLICE_ARTIFACTS`` (``tests/artifacts``
by default).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import ARTIFACTS, CALL_API_WITH_COOKIES, browser, log_in, until
from tests.platform.conftest import Platform, run_up
from tests.ports import free_span
from tests.waits import scaled

pytestmark = pytest.mark.docker

__all__ = ["browser"]  # the Chromium fixture, for this module's tests
SPAN = 10
MARKER = "served-in-port-mode.txt"
SERVE = ("import subprocess, sys; open('" + MARKER + "', 'w').write('hi'); "
         "subprocess.Popen([sys.executable, '-m', 'http.server', '8000'], "
         "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")


@pytest.fixture(scope="module")
def span() -> range:
    first = free_span(SPAN)
    return range(first, first + SPAN)


@pytest.fixture(scope="module")
def plat(base_image: str, span: range,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("ports"), {
        "GPUSLICE_APPS__PORT_RANGE": f"{span[0]}-{span[-1]}"})


def test_the_launcher_opens_a_server_at_its_own_port(plat: Platform, browser: Any,
                                                     base_image: str, span: range) -> None:
    sid = plat.session("ports", base_image, "--cpu", "0.5", "--mem", "256m")
    assert plat.client().exec(sid, ["python3", "-c", SERVE]).exit_code == 0

    def listed() -> dict[str, Any] | None:
        apps = {a["name"]: a for a in json.loads(plat.ok("app", "list", sid, "--json"))}
        return apps if "8000" in apps else None

    url = until(listed, 60, "port 8000 in `gpuslice app list`")["8000"]["url"]
    port = int(url.rsplit(":", 1)[1].rstrip("/"))
    assert url == f"http://localhost:{port}/" and port in span, url

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    manager = f"http://localhost:{plat.port}"
    log_in(page, manager, plat.admin_password(), "ports")
    page.goto(f"{manager}/#/sessions/{sid}")
    page.wait_for_selector("#open-8000", timeout=scaled(60) * 1000)
    with context.expect_page() as opened:
        page.click("#open-8000")
    served = opened.value
    served.wait_for_load_state()
    until(lambda: MARKER in served.inner_text("body"), 30, "the session's directory list")
    assert served.url == url, served.url
    served.screenshot(path=str(ARTIFACTS / "ports-http-server-8000.png"))

    # the app port's cookie is its own, and its page cannot use the manager's API
    cookies = {c["name"]: c for c in context.cookies() if c["name"].startswith("gpuslice_")}
    assert set(cookies) == {"gpuslice_login", f"gpuslice_app_{port}"}
    assert cookies[f"gpuslice_app_{port}"]["httpOnly"]
    reached = served.evaluate(CALL_API_WITH_COOKIES, f"{manager}/api/v1/sessions")
    assert reached.startswith("refused") and sid not in reached, reached
    context.close()
    plat.ok("session", "destroy", sid)
