"""The session page and the admin usage page in real Chromium (issue 34): a mock-GPU session's
GPU memory and utilisation charts with labelled axes, totals precise enough for a short
session, a logs placeholder, ages that keep counting, "stopped by <owner>", and the admin
usage table's precision and CPU chart. Screenshots in ``tests/artifacts/``.

One `gpuslice up` (one mock 8 GiB GPU, 2 fGPU per GPU) and one browser serve the module.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuslice.client import Client
from tests.browser import ARTIFACTS, until
from tests.platform.conftest import Platform
from tests.platform.console_helpers import (
    BASE,
    browser,
    destroy_all,
    open_console,
    plat,
    users,
)
from tests.waits import scaled

pytestmark = pytest.mark.docker
__all__ = ["browser", "plat", "users"]
MiB = 1024**2
BUSY = ("gpuslice-mock-gpu --mem 1g --util 60 --seconds 900 & "
        "timeout 30 sh -c 'while :; do :; done'; wait")  # GPU held, and CPU busy for 30 s


def wait_measured(client: Client, sid: str) -> Any:
    """The session's stats once a point shows its GPU memory and CPU (a heartbeat or two)."""
    return until(lambda: (s := client.session_stats(sid, since="1h")).points and any(
        p.gpu_mem and p.cpu for p in s.points) and s, 90, "GPU memory and CPU measured")


def two_significant(value: float) -> str:
    """How the console writes an amount: 2 significant digits below 1, 2 decimals above."""
    shown = float(f"{value:.2g}") if value < 1 else round(value, 2)
    return f"{shown:.10f}".rstrip("0").rstrip(".")


def chart(page: Any, selector: str) -> dict[str, Any]:
    """What a chart shows a reader: its axis titles, tick labels and points' tooltips."""
    texts = lambda cls: [t.text_content() for t in page.query_selector_all(f"{selector} .{cls}")]  # noqa: E731
    return {"y": texts("axis-y"), "x": texts("axis-x"), "ticks_y": texts("tick-y"),
            "ticks_x": texts("tick-x"), "points": [
                t.text_content() for t in page.query_selector_all(f"{selector} circle title")]}


def test_session_page_charts_totals_logs_and_stop(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    alice = users["alice"]
    [busy] = alice.create_sessions(image=BASE, type="batch", name="busy", gpu=1, cpu=0.5,
                                   mem="256m", command=["sh", "-c", BUSY])
    [quiet] = alice.create_sessions(image=BASE, name="quiet", gpu=0, cpu=0.25, mem="256m")
    alice.wait(busy.id, {"RUNNING"}, timeout=scaled(60))
    alice.wait(quiet.id, {"RUNNING"}, timeout=scaled(60))
    page = open_console(plat, browser, "alice")
    # ages count on between refreshes (a RUNNING row is not redrawn: they stood still)
    age = f"#session-rows tr[data-id='{quiet.id}'] td[title]"  # the Age column
    first = until(lambda: page.inner_text(age), 10, "the age cell")
    until(lambda: page.inner_text(age) != first, 5, f"the age to move on from {first}")

    stats = wait_measured(alice, busy.id)
    page.goto(f"{plat.url}/#/sessions/{busy.id}")
    page.wait_for_selector("#chart-gpu-mem circle")
    mem = chart(page, "#chart-gpu-mem")
    assert (mem["y"], mem["x"]) == (["GPU memory (MiB)"], ["time"])
    assert mem["ticks_y"] == ["0", "2048", "4096"]  # up to the slice's memory: 1 fGPU of 8 GiB
    assert mem["ticks_x"] and all(re.fullmatch(r"\d\d:\d\d( [AP]M)?", t) for t in mem["ticks_x"])
    assert any(p.endswith(": 1024 MiB") for p in mem["points"]), mem
    util = chart(page, "#chart-gpu-util")
    assert util["y"] == ["GPU util (%)"] and util["ticks_y"] == ["0", "50", "100"]
    assert any(p.endswith(": 60 %") for p in util["points"]), util
    assert chart(page, "#chart-cpu")["y"] == ["CPU (cores)"]
    totals = page.inner_text("#usage-totals")
    fgpu_h = float(re.search(r"([\d.]+) fGPU-h", totals).group(1))  # type: ignore[union-attr]
    assert fgpu_h > 0, totals  # 1 fGPU for under a minute: 0.0083, once shown as "0"
    assert abs(fgpu_h - float(stats.totals.fgpu_hours)) <= float(stats.totals.fgpu_hours)
    page.locator("#session-usage").screenshot(path=str(ARTIFACTS / "console-session-usage.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#session-usage").screenshot(
        path=str(ARTIFACTS / "console-session-usage-narrow.png"))
    page.set_viewport_size({"width": 1280, "height": 800})

    page.goto(f"{plat.url}/#/sessions/{quiet.id}")
    until(lambda: page.inner_text("#session-logs").startswith("No logs yet: nothing printed"),
          20, "the logs placeholder of a RUNNING session that printed nothing")
    assert page.is_visible("#destroy-one")  # the page is loaded, not only its frame
    page.locator("#session-logs").screenshot(path=str(ARTIFACTS / "console-session-no-logs.png"))
    page.click("#destroy-one")  # alice stops her own session
    until(lambda: "stopped by alice" in page.inner_text("#session-history"), 30,
          "the history naming alice")
    assert "admin" not in page.inner_text("#session-history")
    destroy_all(alice)


def test_admin_usage_table_is_precise_and_its_cpu_chart_has_data(
    plat: Platform, browser: Any, users: dict[str, Client]
) -> None:
    bob = users["bob"]
    [s] = bob.create_sessions(image=BASE, type="batch", name="cpu", gpu=1, cpu=0.5,
                              mem="256m", command=["sh", "-c", BUSY])
    bob.wait(s.id, {"RUNNING"}, timeout=scaled(60))
    wait_measured(bob, s.id)
    report = plat.client().usage(user="bob", since="1d")
    [row] = [r for r in report.rows if r.day == report.until]
    page = open_console(plat, browser, "admin", plat.admin_password())
    page.goto(f"{plat.url}/#/admin/usage")
    page.wait_for_selector("#usage tbody tr")
    cells = [[td.inner_text() for td in tr.query_selector_all("td")]
             for tr in page.query_selector_all("#usage tbody tr")]
    [shown] = [c for c in cells if c[1] == "bob"]
    for cell, value in zip(shown[3:5], (row.totals.fgpu_hours, row.totals.cpu_hours),
                           strict=True):  # fGPU-h, CPU-h: under a minute's worth, not "0"
        assert float(value) > 0 and float(cell) == pytest.approx(float(value), rel=0.5)
        assert cell == two_significant(float(cell)), cell  # not rounded to 0.01s
    bars = page.query_selector_all("#usage-cpu rect")
    assert any(float(b.get_attribute("height") or 0) > 0 for b in bars), "an empty CPU chart"
    page.screenshot(path=str(ARTIFACTS / "console-admin-usage.png"), full_page=True)
    destroy_all(bob)
