"""`gpuslice app list` shows the process behind each port of a session: a name its user
chose (any process may rename itself, prctl PR_SET_NAME), read by whoever lists the apps (an
admin too, with apps.admin_access). It is shown as text: neither the terminal's control
sequences nor Rich's markup reach the terminal that lists it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.manager.fake_agent import FakeAgent
from tests.manager.test_proxy import agent, running, settings, token_of, url
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "GPUSLICE_URL": url, "GPUSLICE_TOKEN": await token_of(admin)}
    # in a thread: the manager answering it runs on this test's event loop
    done = await asyncio.to_thread(
        subprocess.run, [GPUSLICE, "app", "list", sid], env=env, capture_output=True,
        text=True, timeout=scaled(60), check=False)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\ufffd]0;owned\ufffd\\" in done.stdout
    assert "[link=x]a[/link]" in done.stdout
