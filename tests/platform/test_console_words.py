"""Issue 34 in Chromium: commit from the session page (findings 3, 10), errors in words,
revoke only what can be revoked, wide tables that say they scroll on a phone (finding 10).

One `gpuslice up` (one mock 8 GiB GPU) and one browser for the module; screenshots go to
``tests/artifacts/`` (``console-words-*.png``).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiodocker
import httpx
import pytest

from gpuslice.client import Client
from tests.browser import ARTIFACTS, post_login, until
from tests.platform import app_image
from tests.platform.conftest import Platform, run_up
from tests.platform.console_helpers import (
    BASE,
    PASSWORD,
    browser,  # noqa: F401 (the module's browser fixture)
    destroy_all,
    launch,
    open_console,
    rows,
)
from tests.waits import wait_for

pytestmark = pytest.mark.docker

# What a person should never have to read: field paths, API paths, Markdown, Pydantic's words.
API_SPEAK = re.compile(r"`|/api/v1|resources\.|\bmem:|should have|Input should|Field required")
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def commit_name() -> Iterator[str]:
    """A name of its own for the run (the node keeps images between runs), its images
    removed once the platform has stopped (a warm network sandbox may run the newest)."""
    name = f"myenv-{uuid.uuid4().hex[:6]}"
    yield name

    def removed() -> bool:
        listed = subprocess.run(["docker", "images", "-q", f"u/alice/{name}"],
                                capture_output=True, text=True, check=False).stdout.split()
        return not listed or subprocess.run(["docker", "rmi", *set(listed)],
                                            capture_output=True, check=False).returncode == 0

    wait_for(removed, 60, f"u/alice/{name} removed", interval=1)


@pytest.fixture(scope="module")
def plat(base_image: str, apps_image: str, commit_name: str,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    # commit_name first: its images are removed after this platform's containers
    yield from run_up(tmp_path_factory.mktemp("console-words"))


@pytest.fixture(scope="module")
def alice(plat: Platform) -> Client:
    plat.client().create_user("alice", PASSWORD)
    client = Client(plat.url)
    client.login("alice", PASSWORD)
    return client


@pytest.fixture(autouse=True)
def _end_sessions(plat: Platform) -> Iterator[None]:
    yield
    destroy_all(plat.client())


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"console-words-{name}.png"), full_page=True)


def words(text: str) -> str:
    assert text and not API_SPEAK.search(text), text
    return text


def running_row(page: Any, name: str) -> dict[str, str]:
    try:
        return until(lambda: next((r for r in rows(page) if r["name"] == name
                                   and r["status"] == "RUNNING"), None), 120, f"{name} RUNNING")
    except AssertionError:
        shot(page, f"{name}-not-running")
        raise AssertionError(f"{name} not RUNNING; the list shows {rows(page)}, the page "
                             f"{page.inner_text('body')[:500]!r}") from None


def remove_in_container(session_id: str, path: str) -> None:
    """What a user's ``rm`` in the terminal would do, as root: the test image's app file
    belongs to root."""

    async def run() -> None:
        async with aiodocker.Docker() as docker:
            [container] = await docker.containers.list(
                filters={"label": [f"gpuslice.session-id={session_id}"]})
            execution = await container.exec(["rm", path], user="root")
            async with execution.start(detach=False) as stream:
                while await stream.read_out() is not None:
                    pass
            assert (await execution.inspect())["ExitCode"] == 0

    # Playwright's sync API holds this thread's event loop: the Engine API calls get their own
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


def test_commit_from_the_session_page_makes_a_launchable_image_of_hers(
    plat: Platform, browser: Any, alice: Client, apps_image: str,  # noqa: F811
    commit_name: str,
) -> None:
    page = open_console(plat, browser, "alice")
    launch(page, apps_image, cpu="0.25", mem="256m", name="work")
    work = running_row(page, "work")
    # she removes the echo app's program in the session: the image made of it cannot serve it
    remove_in_container(work["id"], app_image.IN_IMAGE)
    page.click(f'#session-rows tr[data-id="{work["id"]}"] a')
    page.click("#commit-open")
    page.wait_for_selector("#commit-dialog")
    assert page.input_value("#commit-tag") == "work"
    page.fill("#commit-name", "My Env")
    page.click("#commit-submit")
    refused = until(lambda: page.inner_text("#commit-error"), 30, "the name's error")
    assert words(refused).startswith("image name 'My Env:work': write lower-case letters")
    page.fill("#commit-name", commit_name)
    page.fill("#commit-tag", "v1")
    page.click("#commit-submit")
    reference = f"u/alice/{commit_name}:v1"
    assert page.query_selector("#commit-progress progress") or page.query_selector(
        "#commit-image"), page.inner_text("#commit-error") or "no progress shown"
    until(lambda: page.inner_text("#commit-image") == reference, 180, "the commit")
    title = "alice's custom image (from gpuslice proxy test apps)"
    assert title in page.inner_text("#commit-progress")
    shot(page, "commit-done")
    page.click("#commit-cancel")  # "Close"

    # in the catalog under her title, with only the app whose program it still has
    [image] = [i for i in alice.list_images() if i.name == reference]
    assert (image.title, [a.name for a in image.apps]) == (title, ["broken"])
    page.goto(plat.url + "/#/sessions")
    page.click("#launch")
    page.select_option("#launch-env", f"u/alice/{commit_name}")
    assert title in page.inner_text("#launch-version")
    page.click("#launch-cancel")
    launch(page, reference, cpu="0.25", mem="256m", name="again")
    again = running_row(page, "again")
    page.click(f'#session-rows tr[data-id="{again["id"]}"] a')
    page.wait_for_selector("#open-terminal")
    assert page.query_selector("#open-broken") is not None
    assert page.query_selector("#open-echo") is None and page.query_selector("#open-slow") is None


def test_bad_input_reads_as_sentences(
    plat: Platform, browser: Any, alice: Client,  # noqa: F811
) -> None:
    page = open_console(plat, browser, "alice")
    launch(page, BASE, cpu="0.25", mem="lots")
    memory = until(lambda: page.inner_text("#err-mem"), 30, "the memory error")
    assert words(memory) == ("Memory: 'lots' is not a size; write e.g. 512m, 2g or 1.5g "
                             "(a plain number counts bytes)")
    shot(page, "launch-memory")
    page.click("#launch-cancel")
    page.goto(plat.url + "/#/folders")
    page.fill("#new-folder", "bad/name")
    page.click("form.bar button[type=submit]")
    folder = until(lambda: page.inner_text("#err-folder"), 30, "the folder error")
    assert words(folder).startswith("Folder name 'bad/name': use 1-64 letters"), folder

    admin = open_console(plat, browser, "admin", plat.admin_password())
    admin.goto(plat.url + "/#/admin/users")
    admin.fill("#new-user", "carol")
    admin.fill("#new-password", "short")
    admin.click("form.bar button[type=submit]")
    password = until(lambda: admin.inner_text("#err-user"), 30, "the password error")
    assert words(password) == "Password: use at least 8 characters"
    shot(admin, "password")


def test_only_an_active_join_token_offers_revoke(
    plat: Platform, browser: Any,  # noqa: F811
) -> None:
    admin_client = plat.client()
    page = open_console(plat, browser, "admin", plat.admin_password())
    page.goto(plat.url + "/#/admin/tokens")
    for name in ("spent", "spare"):
        page.fill("#token-name", name)
        page.click("form.bar button[type=submit]")
        until(lambda n=name: n in page.inner_text("#tokens"), 30, f"token {name}")
        if name == "spent":
            secret = page.inner_text("#token-secret").split("GPUSLICE_AGENT_JOIN_TOKEN=")[1]
            token = secret.split()[0]
    joined = httpx.post(f"{plat.url}/api/v1/agents/register",
                        json={"join_token": token, "name": "spent-node"}, timeout=30)
    assert joined.status_code == 201, joined.text
    admin_client.revoke_node("spent-node")  # not a node that runs anything here
    page.reload()
    page.wait_for_selector("#tokens")
    by_name = {tr.query_selector("td").inner_text(): tr for tr in
               page.query_selector_all("#tokens tbody tr")}
    assert by_name["spent"].query_selector("td:nth-child(3)").inner_text() == "used"
    assert by_name["spent"].query_selector("button") is None
    assert by_name["spare"].query_selector("button").inner_text() == "Revoke"
    page.screenshot(path=str(ARTIFACTS / "console-words-tokens.png"))


def test_wide_tables_scroll_in_their_box_with_a_cue_on_a_phone(
    plat: Platform, browser: Any, alice: Client,  # noqa: F811
) -> None:
    alice.create_folder("data")
    desk = open_console(plat, browser, "alice")
    launch(desk, BASE, cpu="0.25", mem="256m", name="narrow")
    running_row(desk, "narrow")
    phone = browser.new_context(viewport=PHONE).new_page()
    phone.goto(plat.url + "/")
    post_login(phone, "admin", plat.admin_password())
    for route, table in (("sessions", "#sessions"), ("folders", "#folders"),
                         ("admin/nodes", ".slice-table"), ("admin/usage", "#usage")):
        phone.goto(f"{plat.url}/#/{route}")
        phone.wait_for_selector(table)
        wrap = phone.query_selector(".table-wrap")
        state = until(lambda w=wrap: _cue(phone, w), 10, f"the {route} table's cue")
        # the page itself never scrolls sideways: the table does, inside its box
        assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        if route in ("sessions", "folders", "admin/nodes"):
            assert state == ("scrolls", "scroll →"), (route, state)
        name = route.replace("/", "-")
        phone.screenshot(path=str(ARTIFACTS / f"console-words-phone-{name}.png"))
        if state[0] == "scrolls":
            # scrolled to its end again at each look, as a person would: a live table grows
            # while it is read (a session's age, a node's name), which moves its end further
            until(lambda w=wrap: _to_end(phone, w) == ("scrolls", "← scroll"), 10, "at its end")


def _to_end(page: Any, wrap: Any) -> tuple[str, str] | None:
    wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; }")
    return _cue(page, wrap)


def _cue(page: Any, wrap: Any) -> tuple[str, str] | None:
    """("scrolls", its hint) where the table is wider than its box, ("fits", "") where not;
    None while the two disagree (the page is still being drawn)."""
    wider = wrap.evaluate("w => w.scrollWidth > w.clientWidth + 1")
    marked = "scrolls" in (wrap.get_attribute("class") or "")
    if wider != marked:
        return None
    hint = wrap.evaluate("w => getComputedStyle(w, '::before').content")
    return ("scrolls", hint.strip('"')) if wider else ("fits", "")
