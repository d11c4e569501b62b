"""A real Prometheus server for tests (Debian's ``prometheus`` package, which ``make test``
installs), started on a free local port with the repository's scrape config (and the alert
rules it loads) pointed at a manager, and its HTTP query API.

Tests that need it skip, saying why, when the binary is missing.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import free_port
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[1]
SCRAPE_CONFIG = REPO / "deploy" / "monitoring" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "monitoring" / "grafana-dashboard.json"
ALERT_RULES = REPO / "deploy" / "monitoring" / "alerts.yml"


def prometheus_binary() -> str:
    """The prometheus binary, or skip the test with the reason."""
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("no prometheus binary (Debian package `prometheus`; `make test` installs "
                    "it through tools/host-setup.sh)")
    return found


class Prometheus:
    """A running server: ``query(expr)`` answers the instant vector as a list of samples."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = answer.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        return list(body["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The answer to ``expr`` once it has any sample (scrapes take a moment)."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            found = self.query(expr)
            if found:
                return found
            if time.monotonic() > deadline:
                targets = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
                raise AssertionError(f"no {expr!r} within {timeout:.0f}s; targets: "
                                     f"{json.dumps(targets)[:2000]}\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)


@contextmanager
def prometheus(target: str, token: str, workdir: Path) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (``host:port``) every second with the repository's scrape
    config (its target and token file replaced), until the block ends."""
    binary = prometheus_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    token_file = workdir / "scrape-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = SCRAPE_CONFIG.read_text()
    for old, new in (('["127.0.0.1:8080"]', f'["{target}"]'),
                     ("/etc/prometheus/gpuslice-scrape-token", str(token_file)),
                     ("scrape_interval: 15s", "scrape_interval: 1s"),
                     ("evaluation_interval: 15s", "evaluation_interval: 1s")):
        assert old in config, f"{SCRAPE_CONFIG} no longer has {old!r}"
        config = config.replace(old, new)
    (workdir / "prometheus.yml").write_text(config)
    shutil.copy(ALERT_RULES, workdir / ALERT_RULES.name)  # rule_files: beside the config
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=1h"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_ready(server: Prometheus, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline and server.process.poll() is None:
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"prometheus did not start:\n{server.log.read_text()[-3000:]}")
