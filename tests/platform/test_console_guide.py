"""The users' guide's four chapters, as written, in real Chromium against `gpuslice up` (one
mock 8 GiB GPU with 108 SMs, 2 fGPU per GPU) (issue 34): (1) fractional GPU: a 0.5 fGPU
session from the dialog, which says what the slice is, and `nvidia-smi` in its web terminal;
(2) the scheduler, touching only the GPU slider and the Sessions count (the default preset does
the rest): two run, one waits with its reason and starts when one is destroyed, without a
reload; (3) two versions of a framework image, each printing its version in its terminal;
(4) a private image typed into the dialog, and a name the user may not use refused next to the
field. Screenshots go to ``GPUSLICE_ARTIFACTS`` (default ``tests/artifacts/``), named
``guide-*.png``.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpuslice.client import Client
from tests.browser import ARTIFACTS, post_login, until
from tests.platform.conftest import Platform, run_up
from tests.platform.console_helpers import PASSWORD, destroy_all, open_console, rows
from tests.platform.console_helpers import browser as browser  # noqa: F401 (a fixture)
from tests.waits import scaled

pytestmark = pytest.mark.docker

ARTIFACTS_PREFIX = "guide"
# The framework images of chapter 3, best first: `make images-ml` builds PyTorch and
# TensorFlow ones (not in CI); the scikit-learn images are built everywhere.
FRAMEWORKS = (("torch", "torch"), ("tensorflow", "tensorflow"), ("scikit-learn", "sklearn"))


@pytest.fixture(scope="module")
def plat(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("guide"))


@pytest.fixture(scope="module")
def alice(plat: Platform) -> Client:
    plat.client().create_user("alice", PASSWORD)
    client = Client(plat.url)
    client.login("alice", PASSWORD)
    return client


@pytest.fixture
def page(plat: Platform, browser: Any, alice: Client) -> Iterator[Any]:
    opened = open_console(plat, browser, "alice")
    yield opened
    opened.context.close()
    destroy_all(alice)


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{ARTIFACTS_PREFIX}-{name}.png"))


def open_dialog(page: Any) -> None:
    page.click("#launch")
    page.wait_for_selector("#launch-dialog")
    until(lambda: "Fits now" in page.inner_text("#launch-fit"), 10, "the dialog's preview")


def terminal_says(page: Any, plat: Platform, sid: str, command: str, wanted: str) -> None:
    page.goto(f"{plat.url}/#/sessions/{sid}")
    page.wait_for_selector("#open-terminal", timeout=60_000)
    page.click("#open-terminal")
    until(lambda: "connected" in page.inner_text("#terminal-status"), 30, "the terminal")
    page.click("#terminal-box")
    page.keyboard.type(command + "\n")
    until(lambda: wanted in page.inner_text(".xterm-rows"), 60, wanted)


def test_chapter_1_a_fractional_gpu_and_nvidia_smi(
    plat: Platform, page: Any, alice: Client
) -> None:
    open_dialog(page)
    # what a new user sees first: the standard image, not a test or internal one, by title
    envs = page.locator("#launch-env option").all_inner_texts()
    assert envs[0] == "Standard (Python, pip, shell)", envs
    assert page.input_value("#launch-env") == "gpuslice/base"
    assert page.input_value("#launch-version") == "gpuslice/base:0.1.0"  # the release
    assert not any("rootfs" in e or "gpuslice-test" in e or "/" in e for e in envs), envs
    assert "scikit-learn (CPU)" in envs, envs
    assert page.input_value("#launch-preset") == "small"  # the default preset
    page.locator("#launch-gpu-range").fill("0.5")  # the guide's only step: the GPU slider
    until(lambda: "0.5 fGPU =" in page.inner_text("#launch-slice"), 10, "what the slice is")
    assert page.inner_text("#launch-slice") == (
        "0.5 fGPU = 2 GiB and 25 % of the SMs (27 of 108) of a Mock GPU 8 GiB")
    assert page.inner_text("#launch-warning") == ""  # the standard image may use a GPU
    shot(page, "1-dialog")
    page.click("#launch-submit")
    page.wait_for_selector("#launch-dialog", state="detached")
    [session] = until(lambda: [r for r in rows(page) if r["status"] == "RUNNING"], 60,
                      "the session RUNNING")
    assert session["config"].startswith("0.5 fGPU · 0.25 CPU · 1 GiB"), session
    terminal_says(page, plat, session["id"], "nvidia-smi", "2048 MiB")
    shot(page, "1-nvidia-smi")


def test_chapter_2_the_scheduler_with_the_gpu_and_sessions_sliders_only(
    plat: Platform, page: Any
) -> None:
    open_dialog(page)
    page.locator("#launch-gpu-range").fill("1")
    page.locator("#launch-count-range").fill("3")
    until(lambda: "Fits now: 2 · Will queue: 1" in page.inner_text("#launch-fit"), 10,
          "2 fit, 1 queues (the GPU, not the CPU, decides)")
    assert "fGPU" in page.inner_text("#launch-fit"), page.inner_text("#launch-fit")
    shot(page, "2-dialog")
    page.click("#launch-submit")
    page.wait_for_selector("#launch-dialog", state="detached")
    shown = until(lambda: (r := rows(page)) and sorted(x["status"] for x in r) == [
        "PENDING", "RUNNING", "RUNNING"] and r, 90, "2 RUNNING + 1 PENDING")
    waiting = next(r for r in shown if r["status"] == "PENDING")
    assert "#1 in queue" in waiting["reason"] and "fGPU" in waiting["reason"], waiting
    shot(page, "2-queue")
    running = next(r for r in shown if r["status"] == "RUNNING")
    page.click(f"#session-rows tr[data-id='{running['id']}'] button.danger")
    until(lambda: next(r for r in rows(page) if r["id"] == waiting["id"])["status"] == "RUNNING",
          60, "the waiting session RUNNING without a reload")
    shot(page, "2-started")


def test_chapter_3_two_versions_in_their_terminals(
    plat: Platform, page: Any, alice: Client
) -> None:
    framework, module, versions = _framework_images(alice)
    print(f"chapter 3 uses {framework}: {[v.name for v in versions]}")
    for image in versions:  # one after the other: a framework image's minimums are large
        version = image.frameworks[framework]
        open_dialog(page)
        page.select_option("#launch-env", image.name.rsplit(":", 1)[0])
        page.select_option("#launch-version", image.name)
        page.locator("#launch-gpu-range").fill("0.5")
        if image.cpu_only:  # the dialog says so before a GPU slice is wasted on it
            until(lambda: "CPU-only image" in page.inner_text("#launch-warning"), 10, "warning")
            shot(page, "3-cpu-only-warning")
            page.fill("#launch-gpu", "0")
            until(lambda: page.inner_text("#launch-warning") == "", 10, "no warning at 0")
        else:
            assert page.inner_text("#launch-warning") == ""
        name = "v-" + version.replace(".", "-").replace("+", "-")
        page.fill("#launch-name", name)
        shot(page, f"3-dialog-{version}")
        page.click("#launch-submit")
        page.wait_for_selector("#launch-dialog", state="detached")
        sid = until(lambda n=name: alice.get_session(n).id, 10, name)
        alice.wait(sid, {"RUNNING"}, timeout=scaled(120))
        terminal_says(page, plat, sid,
                      f"python3 -c 'import {module}; print(\"v=\" + {module}.__version__)'",
                      "v=" + version)
        shot(page, f"3-terminal-{version}")
        destroy_all(alice)
        page.goto(f"{plat.url}/#/sessions")
        page.wait_for_selector("#launch")


def test_chapter_4_a_private_image_typed_into_the_dialog(
    plat: Platform, page: Any, alice: Client
) -> None:
    [src] = alice.create_sessions(image="gpuslice/base:0.1.0", cpu=0.25, mem="256m", name="src")
    alice.wait(src.id, {"RUNNING"}, timeout=scaled(60))
    tag = uuid.uuid4().hex[:8]
    private = alice.commit("src", f"my-env:{tag}").image.name
    assert private == f"u/alice/my-env:{tag}"
    try:
        open_dialog(page)
        page.fill("#launch-image", "u/bob/my-env:1")  # not alice's: answered as unknown
        page.click("#launch-submit")
        until(lambda: "unknown image" in page.inner_text("#err-image"), 10, "the image error")
        shot(page, "4-refused")
        assert page.is_visible("#launch-dialog")
        page.fill("#launch-image", private)
        page.fill("#launch-name", "mine")
        until(lambda: page.inner_text("#err-image") == "" and
              "Fits now" in page.inner_text("#launch-fit"), 10, "the typed image accepted")
        shot(page, "4-typed")
        page.click("#launch-submit")
        page.wait_for_selector("#launch-dialog", state="detached")
        sid = until(lambda: alice.get_session("mine").id, 10, "mine")
        assert alice.wait(sid, {"RUNNING"}, timeout=scaled(120)).image == private
    finally:
        destroy_all(alice)
        subprocess.run(["docker", "rmi", "-f", private], capture_output=True, check=False)


def test_the_dialog_at_390_px_and_by_keyboard(plat: Platform, browser: Any, alice: Client) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(plat.url + "/")
    post_login(page, "alice", PASSWORD, enter=True)
    page.wait_for_selector("#launch")
    page.focus("#launch")
    page.keyboard.press("Enter")
    page.wait_for_selector("#launch-dialog")
    assert focused_id(page) == "launch-env"
    focused = []
    for _ in range(5):
        page.keyboard.press("Tab")
        focused.append(focused_id(page))
    # the environment, then the project and its resource group (issue 32), then the preset
    assert focused == ["launch-version", "launch-image", "launch-project", "launch-group",
                       "launch-preset"], focused
    for selector in ("#launch-dialog", "#launch-submit", "#launch-image", "#launch-project",
                     "#launch-preset"):
        box = page.locator(selector).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (selector, box)
    shot(page, "390px")
    context.close()


def focused_id(page: Any) -> str | None:
    # a selector, not page.evaluate: the console's CSP forbids evaluation
    found: str | None = page.locator(":focus").get_attribute("id")
    return found


def _framework_images(alice: Client) -> tuple[str, str, list[Any]]:
    """Two versions of the best framework there is: its name, module and images."""
    images = [i for i in alice.list_images() if getattr(i, "kind", "") == "framework"]
    for framework, module in FRAMEWORKS:
        having = [i for i in images if framework in i.frameworks]
        repos: dict[str, list[Any]] = {}
        for image in having:
            repos.setdefault(image.name.rsplit(":", 1)[0], []).append(image)
        two = next((v for v in repos.values() if len(v) >= 2), None)
        if two:
            return framework, module, sorted(two, key=lambda i: i.name)[:2]
    pytest.skip("no framework image in two versions (scripts/build-images.sh builds scikit-learn)")
