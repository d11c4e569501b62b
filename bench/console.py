"""The web console in real Chromium: how soon a list of 1,000 sessions is on screen, beside the
same page with one session (its floor), and the size of the console's JavaScript.

    python bench/console.py [--sessions 1000] [--runs 3] [--short]

Runs `gpuslice manager serve` (SQLite in a temporary directory, no node: every session stays
PENDING, so nothing but the list moves) as a process, creates the sessions through the API,
logs a headless Chromium in, and reads the page's own mark: milliseconds from the navigation's
start until the list's first rows (its first page, 100) are painted (``data-list-paint-ms``,
set in the frame after they are drawn), then waits for all the rows. The median of --runs page
loads each. The JavaScript is every console module gzipped (level 9), the terminal emulator
(loaded on first use only) apart. Targets: first paint of 1,000 sessions <= 300 ms; JavaScript
<= 150 KB gz.
Last line:
``list_sessions=… first_paint_ms=… all_rows_ms=… floor_first_paint_ms=… ratio=… js_gz_kb=…``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _local import admin_password, free_port, parse_args, wait_live

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
CONSOLE = Path(__file__).parents[1] / "gpuslice/manager/console/static"
IMAGE = "bench/console:1"


def main() -> None:
    args = _parse()
    from playwright.sync_api import sync_playwright

    executable = next((b for b in BROWSERS if os.path.exists(b)), None)
    if executable is None:
        sys.exit("no Chromium (tools/host-setup.sh --browser installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
        env |= {"GPUSLICE_DATA_DIR": tmp, "GPUSLICE_SESSIONS__MAX_COUNT": "100",
                "GPUSLICE_SESSIONS__MAX_PENDING": str(args.sessions + 10)}
        manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_live(url, manager)
            password = admin_password(Path(tmp))
            with httpx.Client(base_url=url + "/api/v1", timeout=60) as http:
                token = http.post("/auth/login", json={"username": "admin",
                                                       "password": password}).json()
                http.headers["Authorization"] = f"Bearer {token['access_token']}"
                http.post("/images", json={"name": IMAGE}).raise_for_status()
                with sync_playwright() as driver:
                    browser = driver.chromium.launch(executable_path=executable,
                                                     args=["--no-sandbox"])
                    page = _login(browser, url, password)
                    _create(http, 1)
                    floor = [_load(page, url, 1)[0] for _ in range(args.runs)]
                    _create(http, args.sessions - 1)
                    loads = [_load(page, url, args.sessions) for _ in range(args.runs)]
                    browser.close()
        finally:
            manager.terminate()
            try:
                manager.wait(30)
            except subprocess.TimeoutExpired:  # a stream still open: it is only a bench
                manager.kill()
                manager.wait()
    first = statistics.median(x[0] for x in loads)
    every = statistics.median(x[1] for x in loads)
    base = statistics.median(floor)
    js = sum(len(gzip.compress(p.read_bytes(), 9)) for p in CONSOLE.rglob("*.js")) / 1024
    print(f"{args.sessions} sessions: first paint {first:.0f} ms (all rows {every:.0f} ms); "
          f"1 session: {base:.0f} ms; console JavaScript {js:.1f} KB gzipped")
    print(f"list_sessions={args.sessions} first_paint_ms={first:.0f} all_rows_ms={every:.0f} "
          f"floor_first_paint_ms={base:.0f} ratio={first / base:.2f} js_gz_kb={js:.1f}")


def _create(http: httpx.Client, count: int) -> None:
    while count > 0:
        n = min(100, count)
        body = {"image": IMAGE, "count": n, "resources": {"gpu": 0.5, "cpu": 0.25, "mem": "256m"}}
        http.post("/sessions", json=body).raise_for_status()
        count -= n


def _login(browser: Any, url: str, password: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(url + "/")
    page.fill("#u", "admin")
    page.fill("#p", password)
    page.click("button")
    page.wait_for_selector("#sessions")
    return page


def _load(page: Any, url: str, rows: int) -> tuple[float, float]:
    """One fresh load of the list: (first paint, all rows shown) in ms from navigation."""
    page.goto(url + "/#/sessions")
    page.reload()
    page.wait_for_selector("body[data-list-paint-ms]")
    first = float(page.get_attribute("body", "data-list-paint-ms") or 0)
    deadline = time.monotonic() + 60
    while len(page.query_selector_all("#session-rows tr")) < rows:
        if time.monotonic() > deadline:
            raise SystemExit(f"the list never showed {rows} rows")
        time.sleep(0.02)
    every = page.evaluate("performance.now()")
    return first, float(every)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    # past the list's first page of 100, so its later pages are drawn too
    return parse_args(parser, {"sessions": 150, "runs": 1})


if __name__ == "__main__":
    main()
