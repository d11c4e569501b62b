"""Time limits with real containers (`gpuslice up`): the warning signal reaches the session's
command, which can save its work; at its limit the session is ended with that reason."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform, run_up

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
# the warning 3 s before the end; the sweep twice a second
SETTINGS = {"GPUSLICE_SESSIONS__TIME_LIMIT_WARNING": "3",
            "GPUSLICE_SESSIONS__TIME_LIMIT_INTERVAL": "0.5"}


@pytest.fixture(scope="module")
def plat(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from run_up(tmp_path_factory.mktemp("limits"), SETTINGS)


def test_a_batch_session_is_warned_then_ended_at_its_limit(plat: Platform) -> None:
    script = ('trap "echo warned: saving" USR1; echo "limit $GPUSLICE_TIME_LIMIT s"; '
              "while true; do sleep 0.2; done")
    done = plat.cli("session", "create", "--name", "limited", "--type", "batch", "--gpu", "0.5",
                    *SMALL, "--command", f"sh -c '{script}'", "--time", "8s", "--json")
    assert done.returncode == 0, done.stderr
    ended = plat.wait_status("limited", {"TERMINATED", "ERROR"}, timeout=120)
    assert ended["status_reason"] == "time limit reached (8s)", ended
    logs = plat.ok("session", "logs", "limited")
    assert "limit 8 s" in logs and "warned: saving" in logs, logs
    shown = plat.ok("session", "show", "limited")
    assert "SIGUSR1 sent: its time limit ends in 3 s" in shown, shown


CHECKPOINTS = """\
import os, signal, time
warned = []
signal.signal(signal.SIGUSR1, lambda *_: warned.append(1))
print("training for up to", os.environ["GPUSLICE_TIME_LIMIT"], "s", flush=True)
while not warned:
    time.sleep(0.1)
os.makedirs("output", exist_ok=True)
with open("output/model.txt", "w") as f:
    f.write("checkpoint\\n")
print("warned: checkpoint saved", flush=True)
"""


def test_a_run_saves_its_checkpoint_when_warned_and_ends_with_its_model(
    plat: Platform, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(CHECKPOINTS)
    start = subprocess.run([GPUSLICE, "run", "train.py", "--name", "limited-run", "--gpu", "0.5",
                            *SMALL, "--time", "10s", "--detach"], cwd=project, env=plat.env,
                           text=True, capture_output=True, timeout=scaled(120))
    assert start.returncode == 0, start.stderr
    ended = plat.wait_status("limited-run", {"TERMINATED", "ERROR"}, timeout=180)
    assert ended["time_limit"] == 10
    run = json.loads(plat.ok("run", "show", "limited-run", "--json"))
    assert (run["result"], run["exit_code"]) == ("SUCCESS", 0), run
    assert run["model"] is not None and run["model"]["name"] == "limited-run"
    logs = plat.ok("run", "logs", "limited-run")
    assert "training for up to 10 s" in logs and "warned: checkpoint saved" in logs, logs
    plat.ok("model", "download", "limited-run", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "model.txt").read_text() == "checkpoint\n"
