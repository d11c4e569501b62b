"""The web console in real Chromium (Playwright) against `gpuslice up` (one mock 8 GiB GPU,
2 fGPU per GPU), as the users' guide tells it: launch from the dialog, watch the list change
live, open the terminal and JupyterLab from the app launcher; two users never see each other's
sessions or folders; an admin sees every session and the node view.

One platform and one browser serve the module. Screenshots go to ``GPUSLICE_ARTIFACTS``
(default ``tests/artifacts/``; the tests print where).
"""

from __future__ import annotations

import gzip
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuslice.client import Client
from tests.browser import until
from tests.platform.conftest import Platform
from tests.platform.console_helpers import (
    BASE,
    browser,
    destroy_all,
    launch,
    open_console,
    plat,
    rows,
    shot,
    users,
)
from tests.waits import scaled

# JupyterLab, MLflow and a browser: in the docker lane this module shares a process with the
# other one that starts them (tests/conftest.py SAME_PROCESS), never side by side
pytestmark = pytest.mark.docker
__all__ = ["browser", "plat", "users"]  # the fixtures, for this module's tests
CONSOLE = Path(__file__).parents[2] / "gpuslice/manager/console/static"


def test_the_guides_scenario_two_run_one_waits_then_starts(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    page = open_console(plat, browser, "alice")
    launch(page, BASE, gpu="1", count="3", cpu="0.25", mem="256m", name="demo")
    page.wait_for_selector("#launch-dialog", state="detached")
    # three rows at once (the event stream), then two RUNNING and one PENDING with its reason
    until(lambda: len(rows(page)) == 3, 5, "three rows")
    shown = until(lambda: (r := rows(page)) and sorted(x["status"] for x in r) == [
        "PENDING", "RUNNING", "RUNNING"] and r, 60, "2 RUNNING + 1 PENDING")
    waiting = next(r for r in shown if r["status"] == "PENDING")
    assert "#1 in queue" in waiting["reason"] and "fGPU" in waiting["reason"], waiting
    assert all(r["config"].startswith("1 fGPU · 0.25 CPU · 256 MiB") for r in shown), shown
    shot(page, "sessions")

    running = next(r for r in shown if r["status"] == "RUNNING")
    page.click(f"#session-rows tr[data-id='{running['id']}'] button.danger")
    until(lambda: next(r for r in rows(page) if r["id"] == waiting["id"])["status"] == "RUNNING",
          30, "the waiting session RUNNING without a reload")

    other = next(r for r in shown if r["status"] == "RUNNING" and r["id"] != running["id"])
    page.click(f"a[href='#/sessions/{other['id']}']")
    page.wait_for_selector("#allocation .slice-mem")
    assert page.inner_text("#allocation .slice-mem") == "4 GiB"  # 1 of 2 fGPU of 8 GiB
    assert "50%" in page.inner_text("#allocation")
    assert "RUNNING" in page.inner_text("#session-history")
    shot(page, "detail")
    destroy_all(users["alice"])


def test_bad_input_is_shown_next_to_its_field_and_creates_nothing(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    page = open_console(plat, browser, "alice")
    before = users["alice"].list_sessions().total
    launch(page, BASE, gpu="4", cpu="0.25", mem="256m")  # 2 GPUs: the node has one
    # LAUNCH's answer, not only the preview's (which names the GPU first): the button is
    # enabled again once the refusal is in
    until(lambda: "GPU" in page.inner_text("#err-gpu") and page.is_enabled("#launch-submit"),
          10, "the GPU error, from LAUNCH")
    gpu_error = page.inner_text("#err-gpu")
    page.fill("#launch-gpu", "0.5")
    batch = page.locator("#launch-type-batch").bounding_box()
    until(lambda: "Fits now" in page.inner_text("#launch-fit")
          and "GPU" not in page.inner_text("#err-gpu"), 10, "the preview of 0.5 fGPU")
    moved = page.locator("#launch-type-batch").bounding_box()["y"] - batch["y"]
    assert abs(moved) < 1, f"the preview's answer moved the Type choice by {moved:.0f} px"
    page.check("#launch-type-batch")
    page.fill("#launch-command", "echo 'unclosed")
    page.click("#launch-submit")
    until(lambda: "no closing quotation" in page.inner_text("#err-command"), 10, "command error")
    shot(page, "bad-input")
    assert page.is_visible("#launch-dialog")
    assert users["alice"].list_sessions().total == before, gpu_error


def test_a_time_limit_and_a_later_start_from_the_dialog(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    page = open_console(plat, browser, "alice")
    launch(page, BASE, gpu="0.5", cpu="0.25", mem="256m", time="soon")
    until(lambda: "'soon' is not a time limit" in page.inner_text("#err-time"), 10,
          "the time limit's error")
    page.fill("#launch-time", "1:30:00")
    later = (datetime.now() + timedelta(days=30)).replace(hour=22, minute=0, second=0,
                                                          microsecond=0)
    page.fill("#launch-begin", f"{later:%Y-%m-%dT%H:%M}")  # the browser's local time
    page.fill("#launch-name", "tonight")
    page.click("#launch-submit")
    row = until(lambda: next((r for r in rows(page) if r["name"] == "tonight"), None), 30,
                "the session in the list")
    assert row["status"] == "PENDING"
    # the list says when it starts (in the browser's own date format)
    until(lambda: "starts " in page.inner_text(f'tr[data-id="{row["id"]}"]'), 10, "its start")
    made = until(lambda: (s := users["alice"].get_session(row["id"])).wait_code == "begin" and s,
                 30, "its reason")
    assert made.time_limit == 5400 and made.begin_at == later.astimezone()
    utc = later.astimezone(UTC)
    assert made.status_reason == f"starts at {utc:%Y-%m-%d %H:%M} UTC, as asked"
    until(lambda: made.status_reason in page.inner_text(f'tr[data-id="{row["id"]}"]'), 10,
          "its reason in the list")
    page.click(f'a[href="#/sessions/{row["id"]}"]')
    until(lambda: "1h30m" in page.inner_text("#session-summary"), 10,
          "the time limit on its page")
    assert "Starts" in page.inner_text("#session-summary")
    shot(page, "time-limit")
    destroy_all(users["alice"])


def test_two_versions_in_the_terminal_and_jupyter_in_a_new_tab(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    page = open_console(plat, browser, "alice")
    for version in ("1.3.2", "1.5.2"):
        launch(page, f"gpuslice/scipy:{version}", gpu="0.5", cpu="0.5", mem="1g",
               name=f"sk-{version.replace('.', '-')}")
        page.wait_for_selector("#launch-dialog", state="detached")
    for version in ("1.3.2", "1.5.2"):
        sid = users["alice"].get_session(f"sk-{version.replace('.', '-')}").id
        users["alice"].wait(sid, {"RUNNING"}, timeout=scaled(120))
        page.goto(f"{plat.url}/#/sessions/{sid}")
        page.wait_for_selector("#open-terminal", timeout=60_000)
        page.click("#open-terminal")
        until(lambda: "connected" in page.inner_text("#terminal-status"), 30, "terminal")
        page.click("#terminal-box")
        page.keyboard.type("python3 -c 'import sklearn; print(\"v=\" + sklearn.__version__)'; "
                           "nvidia-smi\n")
        wanted = f"v={version}"
        until(lambda w=wanted: w in page.inner_text(".xterm-rows"), 60, wanted)
        until(lambda: "2048 MiB" in page.inner_text(".xterm-rows"), 30, "the slice's memory")
        shot(page, f"terminal-{version}")
    destroy_all(users["alice"])

    if not image_built("gpuslice/notebook:4.2.5"):
        pytest.skip("gpuslice/notebook:4.2.5 is not built (scripts/build-images.sh)")
    page.goto(f"{plat.url}/#/sessions")
    page.wait_for_selector("#launch")
    launch(page, "gpuslice/notebook:4.2.5", gpu="0.5", cpu="0.5", mem="1g", name="nb")
    sid = until(lambda: users["alice"].get_session("nb").id, 10, "nb")
    users["alice"].wait(sid, {"RUNNING"}, timeout=scaled(120))
    page.goto(f"{plat.url}/#/sessions/{sid}")
    page.wait_for_selector("#open-jupyter", timeout=60_000)
    with page.context.expect_page() as opened:
        page.click("#open-jupyter")
    lab = opened.value
    try:
        lab.wait_for_selector(".jp-LauncherCard", timeout=scaled(90) * 1000)
    except Exception as err:  # playwright is imported only where it is installed
        if type(err).__name__ != "TimeoutError":
            raise
        # Seen once in CI on a loaded machine: the tab never drew the launcher, while the same
        # test passes alone in seconds. Keep what the tab showed, then do what its user would
        # (reload once): a JupyterLab that does not work fails the second wait as well.
        shot(lab, "jupyter-first-load")
        lab.reload()
        lab.wait_for_selector(".jp-LauncherCard", timeout=scaled(90) * 1000)
    shot(lab, "jupyter")
    lab.close()
    destroy_all(users["alice"])


SERVE = ("import subprocess, sys; subprocess.Popen([sys.executable, '-m', 'http.server', "
         "'8000'], start_new_session=True, stdout=subprocess.DEVNULL, "
         "stderr=subprocess.DEVNULL)")
STOP = ("import os; [os.kill(int(p), 15) for p in os.listdir('/proc') if p.isdigit() and "
        "b'http.server' in open(f'/proc/{p}/cmdline', 'rb').read() and int(p) != os.getpid()]")


def test_a_server_started_in_the_session_shows_in_the_launcher_until_it_stops(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    alice = users["alice"]
    [session] = alice.create_sessions(image=BASE, cpu="0.5", mem="256m", name="served")
    alice.wait(session.id, {"RUNNING"}, timeout=scaled(120))
    page = open_console(plat, browser, "alice")
    page.goto(f"{plat.url}/#/sessions/{session.id}")
    page.wait_for_selector("#open-terminal", timeout=60_000)
    assert alice.exec(session.id, ["python3", "-c", SERVE]).exit_code == 0
    link = page.wait_for_selector("#open-8000", timeout=scaled(30) * 1000)
    assert link.get_attribute("href").endswith(f"/s/{session.id}/8000/")
    until(lambda: "port 8000 · python3" in page.inner_text("#app-buttons"), 10, "its process")
    shot(page, "served-port")
    assert alice.exec(session.id, ["python3", "-c", STOP]).exit_code == 0
    page.wait_for_selector("#open-8000", state="detached", timeout=scaled(30) * 1000)
    destroy_all(alice)


def test_users_see_only_their_own_and_an_admin_sees_all(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    alice = users["alice"]
    [mine] = alice.create_sessions(image=BASE, gpu=0.5, cpu=0.25, mem="256m", name="alices")
    alice.create_folder("alice-data")
    alice.wait(mine.id, {"RUNNING"}, timeout=scaled(60))

    page = open_console(plat, browser, "bob")
    until(lambda: page.inner_text("#session-count"), 30, "bob's list loaded")  # its count
    # A bounded look (it can only pass too easily on a slow machine): a live list would have
    # shown it by now.
    time.sleep(1.5)
    assert all(r["id"] != mine.id for r in rows(page))
    users["bob"].create_folder("bob-data")  # his own: once it shows, the list has loaded
    page.goto(f"{plat.url}/#/folders")
    until(lambda: "bob-data" in page.inner_text("#folders"), 30, "bob's folders loaded")
    assert "alice-data" not in page.inner_text("#folders")
    users["bob"].delete_folder("bob-data")
    page.goto(f"{plat.url}/#/sessions/{mine.id}")
    try:  # the page asks the API once the route's module has loaded: slow on a loaded machine
        until(lambda: "no session" in page.inner_text("main").lower(), 30, "a 404 for bob")
    except AssertionError:
        raise AssertionError(f"bob's page for alice's session shows "
                             f"{page.inner_text('main')[:300]!r}") from None
    assert not page.is_visible("a[data-page='admin']")

    admin = open_console(plat, browser, "admin", plat.admin_password())
    until(lambda: any(r["id"] == mine.id for r in rows(admin)), 10, "alice's session for admin")
    assert "alice" in admin.inner_text("#sessions")
    admin.goto(f"{plat.url}/#/admin/nodes")
    admin.wait_for_selector(".node .slice-table")
    node_view = admin.inner_text("#admin-body")
    assert plat.node in node_view and "alices" in node_view and "2 GiB" in node_view
    shot(admin, "admin-nodes")
    destroy_all(alice)


def test_the_console_script_stays_small() -> None:
    """Every console module gzipped (the terminal emulator, loaded on first use, apart)."""
    size = sum(len(gzip.compress(p.read_bytes(), 9)) for p in CONSOLE.rglob("*.js"))
    assert size <= 150 * 1024, size


def image_built(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0
