"""`gpuslice app list` shows the process behind each port of a session: a name its user
chose (any process may rename itself, prctl PR_SET_NAME), read by whoever lists the apps (an
admin too, with apps.admin_access); `gpuslice app open` an app's last lines when it fails. They
are shown as text: neither the terminal's control sequences nor Rich's markup reach the
terminal that shows them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.manager.fake_agent import FakeAgent
from tests.manager.proxy_helpers import agent, running, settings, token_of, url
from tests.waits import scaled

__all__ = ["agent", "settings", "url"]
GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
TITLE = "\x1b]0;owned\x1b\\"  # sets the terminal's title: 12 bytes, a process name fits 15


async def test_a_process_name_is_shown_as_text(
        tmp_path: Path, url: str, admin: httpx.AsyncClient, agent: FakeAgent) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        return {"apps": [{"name": a["name"], "state": "ready"} for a in request["ask"]["apps"]],
                "ports": [{"port": 8000, "process": TITLE, "command": "x"},
                          {"port": 8001, "process": "[link=x]a[/link]", "command": "y"}]}

    agent.apps_answer = answer
    sid = await running(admin)
    done = await cli(tmp_path, url, await token_of(admin), "app", "list", sid)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\ufffd]0;owned\ufffd\\" in done.stdout
    assert "[link=x]a[/link]" in done.stdout


async def test_an_apps_last_lines_in_an_error_are_shown_as_text(
        tmp_path: Path, url: str, admin: httpx.AsyncClient, agent: FakeAgent) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        return {"apps": [{"name": a["name"], "state": "failed", "exit_code": 1,
                          "logs": f"oops {TITLE}\n"} for a in request["ask"]["apps"]]}

    agent.apps_answer = answer
    sid = await running(admin)
    done = await cli(tmp_path, url, await token_of(admin), "app", "open", sid, "echo")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: echo failed to start (exit code 1)")
    assert "\x1b" not in done.stderr and "oops \ufffd]0;owned\ufffd\\" in done.stderr


async def cli(home: Path, url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
        "GPUSLICE_URL": url, "GPUSLICE_TOKEN": token}
    # in a thread: the manager answering it runs on this test's event loop
    return await asyncio.to_thread(
        subprocess.run, [GPUSLICE, *args], env=env, capture_output=True, text=True,
        timeout=scaled(60), check=False)
