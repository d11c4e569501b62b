"""Readiness for systemd (`gpuslice.ops.notify`): the protocol on real sockets, and
`gpuslice manager serve` saying READY=1 only once its port answers (no systemd needed: the test
plays systemd's side of ``$NOTIFY_SOCKET``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gpuslice.ops import notify
from tests.notify_socket import NotifySocket
from tests.ports import free_port
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))


@pytest.mark.parametrize("abstract", [True, False], ids=["abstract", "path"])
def test_a_message_reaches_the_socket_systemd_names(tmp_path: Path, abstract: bool) -> None:
    receiver = NotifySocket(None if abstract else tmp_path)
    try:
        assert notify.notify("READY=1", "STATUS=serving", environ=receiver.env)
        assert receiver.wait_for("READY=1", timeout=5) == ["READY=1", "STATUS=serving"]
    finally:
        receiver.close()


def test_without_systemd_or_with_a_dead_socket_nothing_breaks(tmp_path: Path) -> None:
    assert not notify.notify("READY=1", environ={})
    assert not notify.notify("READY=1", environ={"NOTIFY_SOCKET": "vsock:2:1234"})
    gone = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")}
    assert not notify.notify("READY=1", environ=gone)  # logged, not raised


def test_the_watchdog_is_fed_at_half_its_timeout_for_this_process_only() -> None:
    me = str(os.getpid())
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": me}) == 15.0
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert notify.watchdog_interval({}) is None


def test_manager_serve_is_ready_only_when_its_port_answers(tmp_path: Path) -> None:
    receiver = NotifySocket()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    # a unit with WatchdogSec=1s: fed every half second from the event loop
    env |= receiver.env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                           "WATCHDOG_USEC": "1000000"}
    log = (tmp_path / "manager.log").open("w")
    manager = subprocess.Popen([GPUSLICE, "manager", "serve", "--port", str(port)], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    answers: list[int] = []

    def at_ready(fields: list[str]) -> None:
        # at the very moment READY=1 arrives, one request, no retry, must be answered
        if "READY=1" in fields:
            answers.append(httpx.get(f"{url}/api/v1/health/live", timeout=10).status_code)

    try:
        fields = receiver.wait_for("READY=1", lambda: manager.poll() is None,
                                   on_message=at_ready)
        assert answers == [200], (tmp_path / "manager.log").read_text()
        assert f"STATUS=serving on {url}" in fields
        receiver.wait_for("WATCHDOG=1", timeout=10)  # still fed after READY=1
        manager.send_signal(signal.SIGTERM)
        receiver.wait_for("STOPPING=1", timeout=30)
        assert manager.wait(scaled(30)) == 0
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait()
        log.close()
        receiver.close()
