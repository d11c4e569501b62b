"""Single sign-on (issue 42): a Chromium sign-in through the test OpenID provider, from the click
on "Log in with" to the console on screen, and the manager's own time on the provider's
redirect back (the callback: code exchange, ID token check, the user's sign-in, the login
cookie).

    python bench/sso_login.py [--browser-runs 10] [--callbacks 50] [--short]

Runs the test provider (npm oidc-provider on Node, tests/idp/oidc_idp.mjs; `bash
tools/host-setup.sh --idp`) and `gpuslice manager serve` (SQLite in a temporary directory) as
processes. Each browser run is a fresh Chromium context (no session at the provider): the time
from the click on the link until the provider's login form shows, plus the time from its submit
until the console's session list shows (the typing is not counted). Each callback is timed
alone over HTTP (the sign-in at the provider driven by httpx before it). Targets (identity.md
§14 A1): callback p50 <= 500 ms.
Last line: ``round_trip_p50_ms=… round_trip_p99_ms=… callback_p50_ms=… callback_p99_ms=…
browser_runs=… callbacks=… ok=1``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _local import free_port, parse_args, wait_live

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.idp.oidc import CLIENT_ID, CLIENT_SECRET, SCRIPT, oidc_provider  # noqa: E402

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")


def main() -> None:
    args = _parse()
    if not (SCRIPT.parent / "node_modules" / "oidc-provider").is_dir():
        sys.exit("the test OpenID provider is not installed: bash tools/host-setup.sh --idp")
    executable = next((b for b in BROWSERS if os.path.exists(b)), None)
    if executable is None:
        sys.exit("no Chromium (tools/host-setup.sh --browser installs it)")
    with tempfile.TemporaryDirectory() as tmp, oidc_provider(Path(tmp) / "idp") as provider:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
        env |= {"GPUSLICE_DATA_DIR": str(Path(tmp) / "data"),
                "GPUSLICE_AUTH__PUBLIC_URL": url,
                "GPUSLICE_AUTH__OIDC__ISSUER": provider.issuer,
                "GPUSLICE_AUTH__OIDC__CLIENT_ID": CLIENT_ID,
                "GPUSLICE_AUTH__OIDC__CLIENT_SECRET": CLIENT_SECRET,
                "GPUSLICE_AUTH__OIDC__DISPLAY_NAME": "Test IdP",
                "GPUSLICE_AUTH__OIDC__ALLOW_ALL": "true"}
        manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_live(url, manager)
            callbacks = [_callback_ms(url, provider) for _ in range(args.callbacks)]
            trips = _round_trips_ms(url, executable, args.browser_runs)
        finally:
            manager.terminate()
            manager.wait(timeout=30)
    print(f"callback: {_stats(callbacks)}; round trip: {_stats(trips)}")
    print(f"round_trip_p50_ms={_pct(trips, 50):.0f} round_trip_p99_ms={_pct(trips, 99):.0f} "
          f"callback_p50_ms={_pct(callbacks, 50):.1f} callback_p99_ms={_pct(callbacks, 99):.1f} "
          f"browser_runs={len(trips)} callbacks={len(callbacks)} ok=1")


def _callback_ms(url: str, provider: object) -> float:
    with httpx.Client(base_url=url, timeout=30) as http, httpx.Client(timeout=30) as idp:
        start = http.get("/auth/oidc/start")
        back = provider.sign_in(idp, start.headers["location"], "alice",  # type: ignore[attr-defined]
                                "alice-password")
        began = time.perf_counter()
        answer = http.get(back)
        took = (time.perf_counter() - began) * 1000
        if answer.status_code != 303 or "gpuslice_login" not in http.cookies:
            sys.exit(f"the callback did not sign alice in: {answer.status_code} {answer.text}")
    return took


def _round_trips_ms(url: str, executable: str, runs: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    took = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        for _ in range(runs):
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{url}/login?next=%2F%23%2Fsessions")
            began = time.perf_counter()
            page.click("text=Log in with Test IdP")
            page.wait_for_selector("input[name=login]")
            to_form = time.perf_counter() - began
            page.fill("input[name=login]", "bob")
            page.fill("input[name=password]", "bob-password")
            began = time.perf_counter()
            page.click("button[type=submit]")
            page.wait_for_selector("#sessions", timeout=60_000)
            took.append((to_form + time.perf_counter() - began) * 1000)
            context.close()
        browser.close()
    return took


def _pct(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _stats(values: list[float]) -> str:
    return (f"n={len(values)} min={min(values):.1f} median={statistics.median(values):.1f} "
            f"max={max(values):.1f} ms")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--browser-runs", type=int, default=10)
    parser.add_argument("--callbacks", type=int, default=50)
    return parse_args(parser, {"browser_runs": 2, "callbacks": 5})


if __name__ == "__main__":
    main()
