"""The Prometheus alert rules shipped in deploy/monitoring/: valid (`promtool check rules`),
each firing when it should and not otherwise (`promtool test rules` on alerts_test.yml), and
loaded by a real Prometheus from the scrape config the repository ships."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port
from tests.prometheus import ALERT_RULES, prometheus
from tests.waits import scaled, wait_for

HERE = Path(__file__).resolve().parent
ALERTS = {"GpusliceScrapeDown", "GpusliceNodeLost", "GpusliceQueueStuck",
          "GpusliceSessionOverSlice", "GpusliceBackupTooOld", "GpusliceLoopFailing"}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("no promtool (Debian package `prometheus`; tools/host-setup.sh "
                    "--prometheus installs it)")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=HERE,
                          timeout=scaled(120), check=False)


def test_the_alert_rules_are_valid() -> None:
    done = _promtool("check", "rules", str(ALERT_RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise() -> None:
    tested = (HERE / "alerts_test.yml").read_text()
    assert all(f"alertname: {name}" in tested for name in ALERTS)  # none left untested
    done = _promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_loads_the_rules_from_the_shipped_config(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # no manager there: the scrape alert goes pending
    with prometheus(nobody, "token", tmp_path) as server:
        def loaded() -> dict[str, str]:
            groups = httpx.get(f"{server.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            return {r["name"]: r["health"] for g in groups for r in g["rules"]}

        assert set(loaded()) == ALERTS
        # evaluated without error ("unknown" until the first evaluation)
        wait_for(lambda: loaded() == dict.fromkeys(ALERTS, "ok"), 60, "every rule evaluated")

        def pending() -> bool:
            alerts = httpx.get(f"{server.url}/api/v1/alerts", timeout=10).json()
            return any(a["labels"]["alertname"] == "GpusliceScrapeDown"
                       and a["state"] == "pending" for a in alerts["data"]["alerts"])

        wait_for(pending, 60, "GpusliceScrapeDown pending for an unreachable manager")
