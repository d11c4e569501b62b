"""Apps on their own origins, in Chromium, as a user of the MLflow guide works: the web
terminal, `mlflow ui --host 0.0.0.0`, "MLflow UI" from the app launcher, two training runs,
both listed; a `python -m http.server` on a port nobody declared; and what an app's page
cannot do (reach the manager's API, or carry its cookie elsewhere).

The browser uses the manager at ``http://localhost:<port>``: app origins are
``<app>--<session>.apps.localhost:<port>``, which Chromium resolves to this machine, and the
manager the default ``apps.console_url`` names. Screenshots go to ``GPUSLICE_ARTIFACTS``
(``tests/artifacts`` by default).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import ARTIFACTS, CALL_API_WITH_COOKIES, TRIES, browser, log_in, until
from tests.platform import origins
from tests.platform.conftest import Platform, run_up
from tests.waits import scaled

pytestmark = pytest.mark.docker
__all__ = ["browser"]  # the Chromium fixture, for this module's tests

MLFLOW = "gpuslice/mlflow:3.5.1"


@pytest.fixture(scope="module")
def plat(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("origins"))


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"origins-{name}.png"))


def typed(page: Any, command: str, wanted: str | re.Pattern[str], timeout: float) -> str:
    """Type ``command`` in the page's terminal, and wait until its output shows ``wanted``."""
    pattern = wanted if isinstance(wanted, re.Pattern) else re.compile(re.escape(wanted))
    page.keyboard.type(command + "\n")
    return str(until(lambda: pattern.search(page.inner_text(".xterm-rows")), timeout,
                     f"{wanted!r} after {command!r}")[0])


def test_the_mlflow_guide_as_written_and_a_server_on_any_port(plat: Platform,
                                                              browser: Any) -> None:
    if subprocess.run(["docker", "image", "inspect", MLFLOW], capture_output=True).returncode:
        pytest.skip(f"{MLFLOW} is not built (scripts/build-images.sh builds it)")
    sid = plat.session("guide", MLFLOW, "--cpu", "1", "--mem", "2g")
    client = plat.client()
    # the guide's example sits in the working directory, as its readers have it
    copied = client.exec(sid, ["cp", "/opt/gpuslice/examples/mlflow/train_diabetes.py", "."])
    assert copied.exit_code == 0, copied.stderr
    manager = f"http://localhost:{plat.port}"
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, manager, plat.admin_password(), "origins")

    # 1. the terminal app; `mlflow ui --host 0.0.0.0`
    page.goto(f"{manager}/#/sessions/{sid}")
    page.wait_for_selector("#open-terminal", timeout=scaled(60) * 1000)
    page.click("#open-terminal")
    until(lambda: "connected" in page.inner_text("#terminal-status"), 30, "the terminal")
    page.click("#terminal-box")
    typed(page, "mlflow ui --host 0.0.0.0", "0.0.0.0:5000", 120)
    # the launcher sees the user's own server: no more "stopped" next to it
    until(lambda: re.search(r"Open mlflow\s+ready", page.inner_text("#app-buttons")), 60,
          "MLflow ready in the launcher")
    shot(page, "mlflow-ui-started")

    # 2. "MLflow UI" from the app launcher: the user's own server, at its origin's root
    with context.expect_page() as opened:
        page.click("#open-mlflow")
    ui = opened.value
    ui.wait_for_load_state()
    assert ui.url.startswith(origins.url(plat, sid, "mlflow")), ui.url
    until(lambda: "diabetes" not in ui.inner_text("body") and "Experiments" in
          ui.inner_text("body"), 90, "MLflow's experiments page")
    shot(ui, "mlflow-ui-opened")

    # 3. two training runs, in a second terminal (the first one serves MLflow)
    term = context.new_page()
    term.goto(f"{manager}/s/{sid}/terminal/")
    until(lambda: "connected" in term.inner_text("#status"), 30, "a second terminal")
    term.click("#terminal")
    first = typed(term, "python train_diabetes.py", re.compile(r"run ([0-9a-f]{32})"), 300)
    second = typed(term, "python train_diabetes.py 0.2 0.05",
                   re.compile(r"alpha=0.2, l1_ratio=0.05\).*\n.*run ([0-9a-f]{32})"), 300)
    shot(term, "trained")
    runs = [first.split()[-1], second.split()[-1]]

    # 4. both runs listed in MLflow's UI (their names, as the UI shows them)
    names = run_names(plat, sid, runs)
    def runs_listed() -> bool:
        # MLflow's own page shows "Something went wrong" when a call of its failed (as one
        # Chromium aborts for a network change, tests/browser.py): a person reloads it
        for _ in range(TRIES):
            ui.reload()
            ui.get_by_text("diabetes").first.click()

            def seen() -> str | None:
                body = ui.inner_text("body")
                if all(n in body for n in names):
                    return "listed"
                return "failed" if "Something went wrong" in body else None

            if until(seen, 90, f"both runs ({names}) in MLflow's runs table") == "listed":
                return True
        return False

    assert runs_listed(), f"MLflow's page kept failing: {ui.inner_text('body')[:300]!r}"
    shot(ui, "mlflow-two-runs")

    # 5. a server on a port nobody declared, opened at its own origin
    typed(term, "python -m http.server 8123", "Serving HTTP on", 60)
    until(lambda: re.search(r"Open 8123\s+port 8123 · python", page.inner_text("#app-buttons")),
          60, "port 8123 and its process in the launcher")
    with context.expect_page() as opened_port:
        page.click("#open-8123")
    served = opened_port.value
    served.wait_for_load_state()
    assert served.url == origins.url(plat, sid, "8123"), served.url
    until(lambda: "train_diabetes.py" in served.inner_text("body"), 30, "the directory list")
    shot(served, "http-server-8123")

    # 6. what an app's page cannot do
    reached = served.evaluate(CALL_API_WITH_COOKIES, f"{manager}/api/v1/sessions")
    assert reached.startswith("refused") and sid not in reached, reached
    socket = served.evaluate("""(url) => new Promise((done) => {
        const ws = new WebSocket(url);
        ws.onopen = () => done("open");
        ws.onclose = () => done("closed");
    })""", f"ws://localhost:{plat.port}/api/v1/sessions/{sid}/terminal")
    assert socket == "closed"
    ours = [c for c in context.cookies() if c["name"].startswith("gpuslice_")]
    login = [c for c in ours if c["name"] == "gpuslice_login"]
    apps = {c["domain"]: c for c in ours if c["name"] == "gpuslice_app"}
    assert [c["domain"] for c in login] == ["localhost"]
    assert set(apps) == {origins.host(plat, sid, "mlflow").split(":")[0],
                         origins.host(plat, sid, "8123").split(":")[0]}  # host-only, each
    assert all(c["httpOnly"] and c["sameSite"] == "Lax" for c in apps.values())
    context.close()


def run_names(plat: Platform, sid: str, runs: list[str]) -> list[str]:
    """The names MLflow gave the runs (what its runs table shows), asked at its origin."""
    auth = {"Authorization": f"Bearer {plat.client().token}"}
    names = []
    for run in runs:
        got = origins.request(plat, "GET", sid, "mlflow",
                              f"/ajax-api/2.0/mlflow/runs/get?run_id={run}", headers=auth)
        assert got.status_code == 200, got.text
        names.append(json.loads(got.text)["run"]["info"]["run_name"])
    return names
