"""`gpuslice run` of a name used before, against a real manager: the earlier run keeps
`runs/<name>/` as it ran, and the new run's code goes to `runs/<name>.2/`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli.conftest import GPUSLICE, IMAGE, Manager


def run(manager: Manager, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUSLICE, *args], env=manager.env, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_second_run_of_a_name_gets_its_own_code_directory(
    manager: Manager, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('first')\n")
    start = ("run", "train.py", "--name", "resnet", "--image", IMAGE, "--cpu", "0.25",
             "--mem", "64m", "--detach")
    r = run(manager, tmp_path, *start)
    assert r.returncode == 0 and "its code is in folder runs/resnet/" in r.stderr, r.stderr
    assert run(manager, tmp_path, "run", "stop", "resnet").returncode == 0  # PENDING: ends
    (tmp_path / "train.py").write_text("print('second')\n")
    r = run(manager, tmp_path, *start)
    assert r.returncode == 0 and "its code is in folder runs/resnet.2/" in r.stderr, r.stderr

    runs = json.loads(run(manager, tmp_path, "run", "list", "--json").stdout)
    assert [(r["name"], r["code_dir"]) for r in runs] == [
        ("resnet", "resnet.2"), ("resnet", "resnet")]
    first = run(manager, tmp_path, "folder", "download", "runs", "resnet/train.py",
                "--to", str(tmp_path / "first.py"))
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "first.py").read_text() == "print('first')\n"
