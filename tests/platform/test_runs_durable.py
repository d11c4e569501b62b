"""`gpuslice run` as a user runs it, against the platform's own downtime and with the lab's
old scripts: a run whose script ends while `gpuslice up` is stopped is saved once it is back
(SUCCESS, its model, a duration without the downtime), and `--save-var` keeps the model a
script left in a variable (scikit-learn, for real, in its image)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.waits import scaled, wait_for

from .conftest import GPUSLICE, Platform, Process

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]
WAITS_FOR_GO = """\
import os, time
print("waiting for go", flush=True)
while not os.path.exists("go"):
    time.sleep(0.2)
os.makedirs("output", exist_ok=True)
with open("output/model.txt", "w") as f:
    f.write("trained\\n")
print("trained", flush=True)
"""


def test_a_run_that_ends_while_the_platform_is_down_is_saved_once_it_is_back(
    platform: Platform, tmp_path: Path
) -> None:
    # Issue 35, finding 4: this run ended FAILED (exit 70), its model lost, its duration
    # counting the downtime.
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(WAITS_FOR_GO)
    asked = time.monotonic()
    start = subprocess.run([GPUSLICE, "run", "train.py", "--name", "durable", "--gpu", "0.5",
                            *SMALL, "--detach"], cwd=project, env=platform.env, text=True,
                           capture_output=True, timeout=scaled(120))
    assert start.returncode == 0, start.stderr
    wait_for(lambda: "waiting for go" in platform.cli("run", "logs", "durable").stdout, 120,
             "the script running")
    run_id = json.loads(platform.ok("run", "show", "durable", "--json"))["id"]

    up = platform.processes.pop()
    up.stop()  # Ctrl-C: the manager and its agent stop, the session's container runs on
    [code] = [p.parent for p in platform.data_dir.rglob("durable/train.py")]
    (code / "go").write_text("")
    finished = time.monotonic()
    wait_for(lambda: "waiting for the manager to save output/" in _container_logs(run_id), 60,
             "gpuslice-run waiting for the platform")
    again = Process(up.argv, up.env)
    platform.processes.append(again)
    again.wait_for(f"agent {platform.node}: joined")
    back = time.monotonic()

    def ended() -> dict | None:
        run = json.loads(platform.ok("run", "show", "durable", "--json"))
        return run if run["status"] in ("TERMINATED", "ERROR", "CANCELLED") else None

    run = wait_for(ended, 120, "the run to end")
    assert (run["status"], run["result"], run["exit_code"]) == ("TERMINATED", "SUCCESS", 0)
    assert run["model"] is not None and run["model"]["name"] == "durable"
    platform.ok("model", "download", "durable", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "model.txt").read_text() == "trained\n"
    # The script ran from after the run was asked for until just after "go"; the platform
    # was down from before "go" until `back`, which the duration must not count.
    assert back - finished > 2
    assert 0 < run["duration_s"] < finished - asked + 1, (run, finished - asked)
    logs = platform.ok("run", "logs", "durable")
    assert "gpuslice-run: waiting for the manager to save output/" in logs
    assert "saved output/ as model durable:1 (1 file(s))" in logs


SKLEARN_TRAIN = """\
import numpy as np
from sklearn.linear_model import LinearRegression
X = np.arange(10).reshape(-1, 1)
y = 2 * X.ravel() + 1
model = LinearRegression().fit(X, y)
print("fitted", round(model.coef_[0], 3))
"""


def test_save_var_keeps_a_scikit_learn_model_the_script_never_saved(
    platform: Platform, tmp_path: Path
) -> None:
    image = "gpuslice/scipy:1.5.2"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        pytest.skip(f"{image} is not built here (scripts/build-images.sh builds it)")
    (tmp_path / "train.py").write_text(SKLEARN_TRAIN)
    run = subprocess.run([GPUSLICE, "run", "train.py", "--image", image, "--gpu", "0.5",
                          "--name", "skl", "--cpu", "0.5", "--mem", "1g", "--save-var", "model"],
                         cwd=tmp_path, env=platform.env, text=True, capture_output=True,
                         timeout=scaled(240))
    assert run.returncode == 0, run.stderr + run.stdout
    assert "fitted 2.0" in run.stdout
    assert "run skl: SUCCESS (exit code 0)" in run.stderr and "model skl:1 saved" in run.stderr
    platform.ok("model", "download", "skl", "--to", str(tmp_path / "m"))
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["model.joblib"]
    # The saved object is the fitted model: loaded where scikit-learn is, it predicts.
    loaded = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{tmp_path / 'm'}:/m:ro", image,
         "python3", "-c", "import joblib; print(joblib.load('/m/model.joblib').predict([[20]]))"],
        capture_output=True, text=True, timeout=scaled(120))
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[41.]", loaded.stderr


def _container_logs(session_id: str) -> str:
    done = subprocess.run(["docker", "logs", f"gpuslice-{session_id}"], capture_output=True,
                          text=True, check=False)
    return done.stdout + done.stderr
