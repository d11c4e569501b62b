"""Preemption with real containers (issue 32): a low-priority `gpuslice run` that checkpoints
every few steps is preempted by a high-priority session, goes back to the queue, starts again
by itself once the GPU is free, resumes from its checkpoint and ends SUCCESS with its model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.waits import scaled, wait_for

from .conftest import GPUSLICE, Platform

pytestmark = pytest.mark.docker

CHECKPOINTING = """\
import json, os, signal, sys, time
os.makedirs("output", exist_ok=True)
CK = "output/checkpoint.json"
step = json.load(open(CK))["step"] if os.path.exists(CK) else 0
with open("output/starts.txt", "a") as f:
    f.write(f"start {step} grace {os.environ.get('GPUSLICE_PREEMPT_GRACE_S')}\\n")
print(f"starting at step {step}", flush=True)
stopping = False

def stop(*_):
    global stopping
    stopping = True

signal.signal(signal.SIGTERM, stop)

def save():
    with open(CK + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(CK + ".tmp", CK)
    print(f"checkpoint {step}", flush=True)

while step < 60:
    time.sleep(0.25)
    step += 1
    if step % 4 == 0 or stopping:
        save()
    if stopping:
        print(f"preempted at step {step}", flush=True)
        sys.exit(143)
with open("output/model.txt", "w") as f:
    f.write(f"trained {step} steps\\n")
print("trained", flush=True)
"""


def test_a_preempted_run_resumes_from_its_checkpoint_and_succeeds(
    platform: Platform, tmp_path: Path
) -> None:
    platform.ok("admin", "priority-class", "set", "normal", "--min-runtime", "0",
                "--grace", "5")
    platform.ok("admin", "priority-class", "create", "high", "--rank", "10")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(CHECKPOINTING)
    start = subprocess.run([GPUSLICE, "run", "train.py", "--name", "resumable", "--gpu", "1",
                            "--cpu", "0.25", "--mem", "256m", "--detach"], cwd=project,
                           env=platform.env, text=True, capture_output=True,
                           timeout=scaled(120))
    assert start.returncode == 0, start.stderr
    wait_for(lambda: "checkpoint 8" in platform.cli("run", "logs", "resumable").stdout, 120,
             "the run's first checkpoints")
    # the whole GPU (2 fGPU), for a higher class: the run must make room
    platform.ok("session", "create", "--name", "urgent", "--type", "batch", "--command",
                "sleep 3", "--gpu", "2", "--cpu", "0.25", "--mem", "256m",
                "--priority", "high")
    preempted = platform.wait_reason(
        "resumable", "preempted by your session urgent (priority high)", 60)
    assert preempted["status"] in ("TERMINATING", "PENDING", "SCHEDULED", "PREPARING",
                                   "RUNNING"), preempted
    urgent = platform.wait_status("urgent", {"TERMINATED"}, 120)
    assert urgent["result"] == "SUCCESS", urgent

    def ended() -> dict | None:
        run = json.loads(platform.ok("run", "show", "resumable", "--json"))
        return run if run["status"] in ("TERMINATED", "ERROR", "CANCELLED") else None

    run = wait_for(ended, 180, "the run to end")
    assert (run["status"], run["result"], run["exit_code"]) == ("TERMINATED", "SUCCESS", 0), run
    assert run["model"] is not None and run["model"]["name"] == "resumable"
    platform.ok("model", "download", "resumable", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "model.txt").read_text() == "trained 60 steps\n"
    starts = (tmp_path / "m" / "starts.txt").read_text().splitlines()
    assert len(starts) == 2 and starts[0] == "start 0 grace 5", starts
    resumed_at = int(starts[1].split()[1])
    assert resumed_at >= 8, starts  # from its checkpoint, not from the beginning
    logs = platform.ok("run", "logs", "resumable")
    assert f"starting at step {resumed_at}" in logs
    assert "output/ holds" in logs  # gpuslice-run saw the checkpoint kept for it
    session = json.loads(platform.ok("session", "show", "resumable", "--json"))
    steps = [(h["status"], h["reason"]) for h in session["history"]]
    reason = "preempted by your session urgent (priority high)"
    assert ("TERMINATING", reason) in steps, steps
    assert ("PENDING", f"{reason}; back in the queue in its place") in steps, steps
    assert session["preemptions"] == 1
