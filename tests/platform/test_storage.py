"""Storage folders, the model store and `gpuslice run`, as a user drives them through the CLI
against a real `gpuslice up` (one mock 8 GiB GPU, 2 fGPU per GPU) and real Docker."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import zipfile
from pathlib import Path
from typing import IO

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform
from .users import as_user

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]


@pytest.fixture
def platform(shared_platform: Platform) -> Platform:
    """One `gpuslice up` for the whole module; each test ends its sessions."""
    return shared_platform


def test_a_folder_through_a_session_and_back(platform: Platform, tmp_path: Path) -> None:
    """Created, uploaded, mounted, changed in the session, downloaded; the owner then deletes
    what the session wrote; `..`, absolute paths and links are refused by name."""
    local = tmp_path / "notes.txt"
    local.write_text("from my laptop\n")
    platform.ok("folder", "create", "data")
    platform.ok("folder", "upload", "data", str(local), "--to", "in")
    platform.ok("session", "create", "--name", "box", *SMALL, "--folder", "data", "--wait")
    changed = platform.ok("session", "exec", "box", "--", "sh", "-c",
                          "cat /home/work/data/in/notes.txt && "
                          "echo 'and from the session' >> /home/work/data/in/notes.txt && "
                          "mkdir -p /home/work/data/out && echo result > /home/work/data/out/r && "
                          "ln -s /etc/passwd /home/work/data/link && id -u")
    assert changed == "from my laptop\n1000\n"
    back = tmp_path / "back.txt"
    platform.ok("folder", "download", "data", "in/notes.txt", "--to", str(back))
    assert back.read_text() == "from my laptop\nand from the session\n"
    platform.ok("folder", "download", "data", "out", "--to", str(tmp_path / "out"))
    assert (tmp_path / "out" / "r").read_text() == "result\n"
    listing = json.loads(platform.ok("folder", "ls", "data", "--json"))
    assert {e["path"]: e["type"] for e in listing["entries"]} == {
        "in": "dir", "out": "dir", "link": "link"}

    platform.ok("folder", "rm", "data", "out", "--yes")  # what the session made, as its owner
    platform.ok("folder", "rm", "data", "link", "--yes")
    entries = json.loads(platform.ok("folder", "ls", "data", "--json"))["entries"]
    assert [e["path"] for e in entries] == ["in"]
    platform.ok("session", "exec", "box", "--", "ln", "-s", "/etc", "/home/work/data/etc")
    for args, rule in (
        (["folder", "download", "data", "../../etc/passwd"], "'..' is not allowed"),
        (["folder", "download", "data", "/etc/passwd"], "absolute paths are not allowed"),
        (["folder", "download", "data", "etc/passwd"], "is a symbolic link"),
        (["folder", "upload", "data", str(local), "--to", "../x"], "'..' is not allowed"),
        (["folder", "upload", "data", str(local), "--to", "etc"], "is a symbolic link"),
    ):
        done = platform.cli(*args)
        assert done.returncode != 0 and rule in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    in_use = platform.cli("folder", "delete", "data", "--yes")
    assert in_use.returncode != 0 and "mounted by session(s) box" in in_use.stderr


def _wheel(directory: Path) -> Path:
    """A tiny pure-Python wheel (package ``gsdemo``), made by hand: no index needed."""
    files = {"gsdemo/__init__.py": b"VALUE = 42\n",
             "gsdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gsdemo\n"
             b"Version: 1.0\n",
             "gsdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpuslice-tests\n"
             b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files["gsdemo-1.0.dist-info/RECORD"] = ("\n".join(
        [*record, "gsdemo-1.0.dist-info/RECORD,,"]) + "\n").encode()
    path = directory / "gsdemo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_pip_install_user_persists_in_the_auto_mounted_local(platform: Platform,
                                                            tmp_path: Path) -> None:
    platform.ok("folder", "create", ".local")
    platform.ok("folder", "create", "wheels")
    platform.ok("folder", "upload", "wheels", str(_wheel(tmp_path)))
    platform.ok("session", "create", "--name", "one", *SMALL, "--folder", "wheels:ro", "--wait")
    pip = platform.cli("session", "exec", "--timeout", "120", "one", "--", "python3", "-m",
                       "pip", "install", "--user", "--no-index",
                       "/home/work/wheels/gsdemo-1.0-py3-none-any.whl", timeout=180)
    assert pip.returncode == 0, pip.stderr + pip.stdout
    platform.ok("session", "destroy", "one")
    platform.ok("session", "create", "--name", "two", *SMALL, "--wait")  # no --folder at all
    got = platform.ok("session", "exec", "two", "--", "python3", "-c",
                      "import gsdemo; print(gsdemo.VALUE, gsdemo.__file__)")
    assert got.startswith("42 /home/work/.local/lib/python3")
    shown = json.loads(platform.ok("session", "show", "two", "--json"))
    assert [f["name"] for f in shown["folders"]] == [".local"]


def test_shared_read_only_and_unshared_folders_between_users(platform: Platform,
                                                            tmp_path: Path) -> None:
    bob = as_user(platform, "bob")
    (tmp_path / "a.csv").write_text("x,y\n")
    platform.ok("folder", "create", "team")
    platform.ok("folder", "upload", "team", str(tmp_path / "a.csv"))
    platform.ok("folder", "create", "private")
    platform.ok("folder", "share", "team", "bob")  # read-only
    bob.ok("session", "create", "--name", "bobs", *SMALL, "--folder", "team", "--wait")
    assert bob.ok("session", "exec", "bobs", "--", "cat", "/home/work/team/a.csv") == "x,y\n"
    write = bob.cli("session", "exec", "bobs", "--", "sh", "-c", "echo z >> /home/work/team/a.csv")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    listed = json.loads(bob.ok("folder", "list", "--json"))
    assert [(f["name"], f["access"]) for f in listed] == [("team", "ro")]
    for args in (["folder", "ls", "private"], ["folder", "download", "private", "x"],
                 ["session", "create", *SMALL, "--folder", "private"]):
        done = bob.cli(*args)
        assert done.returncode != 0 and "no folder named" in done.stderr, (args, done.stderr)


TRAIN = """\
import os, sys
print("slice:", os.environ["GPUSLICE_GPU_MEMORY_MIB"], "MiB of GPU memory")
os.makedirs("output", exist_ok=True)
with open("output/model.txt", "w") as f:
    f.write("weights for " + " ".join(sys.argv[1:]) + "\\n")
print("training done")
"""


def test_gpuslice_run_saves_the_model_or_shows_why_it_failed(platform: Platform,
                                                            tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "fail.py").write_text("print('loading')\nraise SystemExit(3)\n")
    (project / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (project / ".gpusliceignore").write_text("data.bin\n")
    run = subprocess.run([GPUSLICE, "run", "train.py", "--gpu-mem", "2048m", "--name", "t1",
                          *SMALL, "--", "--epochs", "3"], cwd=project, env=platform.env, text=True,
                         capture_output=True, timeout=scaled(180))
    assert run.returncode == 0, run.stderr + run.stdout
    assert "slice: 2048 MiB of GPU memory" in run.stdout and "training done" in run.stdout
    assert "run t1: SUCCESS (exit code 0)" in run.stderr and "model t1:1 saved" in run.stderr
    assert "on 0.5 fGPU for 2 GiB of GPU memory" in run.stderr
    [listed] = json.loads(platform.ok("run", "list", "--json"))
    assert (listed["result"], listed["exit_code"], listed["resources"]["gpu"]) == (
        "SUCCESS", 0, 0.5)
    assert listed["model"]["name"] == "t1" and listed["duration_s"] > 0
    code = json.loads(platform.ok("folder", "ls", "runs", "t1", "--json"))["entries"]
    assert "runs/t1/data.bin" not in {e["path"] for e in code}  # .gpusliceignore held
    platform.ok("model", "download", "t1", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "model.txt").read_text() == "weights for --epochs 3\n"
    # a second run of the name: version 2, in a directory of its own; the first stays whole
    again = subprocess.run([GPUSLICE, "run", "train.py", "--gpu-mem", "2048m", "--name", "t1",
                            *SMALL, "--", "--epochs", "5"], cwd=project, env=platform.env,
                           text=True, capture_output=True, timeout=scaled(180))
    assert again.returncode == 0, again.stderr + again.stdout
    assert "its code is in folder runs/t1.2/" in again.stderr
    assert "model t1:2 saved" in again.stderr
    platform.ok("model", "download", "t1", "--to", str(tmp_path / "latest"))
    assert (tmp_path / "latest" / "model.txt").read_text() == "weights for --epochs 5\n"
    platform.ok("model", "download", "t1:1", "--to", str(tmp_path / "first"))
    assert (tmp_path / "first" / "model.txt").read_text() == "weights for --epochs 3\n"
    platform.ok("folder", "download", "runs", "t1/output/model.txt", "--to",
                str(tmp_path / "first-output.txt"))  # the first run's output, as it wrote it
    assert (tmp_path / "first-output.txt").read_text() == "weights for --epochs 3\n"

    failed = subprocess.run([GPUSLICE, "run", "fail.py", "--gpu", "0.5", "--name", "f1", *SMALL],
                            cwd=project, env=platform.env, text=True, capture_output=True,
                            timeout=scaled(180))
    assert failed.returncode == 3
    assert "run f1: FAILED (exit code 3)" in failed.stderr
    assert "last" in failed.stderr and "  loading" in failed.stderr
    assert [m["ref"] for m in json.loads(platform.ok("model", "list", "--json"))] == [
        "t1:1", "t1:2"]
    too_big = subprocess.run([GPUSLICE, "run", "train.py", "--gpu-mem", "9g"], cwd=project,
                             env=platform.env, text=True, capture_output=True, timeout=scaled(60))
    assert too_big.returncode == 2 and "the most possible is 8 GiB" in too_big.stderr


NUMPY_TRAIN = """\
import os
import numpy as np
os.makedirs("output", exist_ok=True)
np.save("output/weights.npy", np.arange(4) * 2)
print("numpy", np.__version__)
"""


def test_gpuslice_run_on_a_scientific_image(platform: Platform, tmp_path: Path) -> None:
    image = "gpuslice/scipy:1.5.2"
    present = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    if present.returncode != 0:
        pytest.skip(f"{image} is not built here (scripts/build-images.sh builds it)")
    (tmp_path / "train.py").write_text(NUMPY_TRAIN)
    run = subprocess.run([GPUSLICE, "run", "train.py", "--image", image, "--gpu", "0.5",
                          "--name", "np1", "--cpu", "0.5", "--mem", "1g"], cwd=tmp_path,
                         env=platform.env, text=True, capture_output=True, timeout=scaled(180))
    assert run.returncode == 0, run.stderr + run.stdout
    assert "numpy " in run.stdout and "model np1:1 saved" in run.stderr
    platform.ok("model", "download", "np1", "--to", str(tmp_path / "m"))
    assert (tmp_path / "m" / "weights.npy").stat().st_size > 0


def test_ctrl_c_leaves_a_run_running_or_stops_it(platform: Platform, tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text(
        "import time\nfor i in range(300):\n    print('step', i, flush=True)\n"
        "    time.sleep(1)\n")
    for answer, name in (("l", "kept"), ("s", "stopped")):
        follow = subprocess.Popen([GPUSLICE, "run", "long.py", "--name", name, *SMALL],
                                  cwd=tmp_path,
                                  env=platform.env, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert follow.stdout is not None and follow.stdin is not None
        for line in follow.stdout:  # until the script prints
            if line.startswith("step"):
                break
        follow.send_signal(signal.SIGINT)
        asked = _read_until(follow.stdout, "[s/l] ")
        assert "Stop run" in asked and "or leave it running" in asked
        follow.stdin.write(answer + "\n")
        follow.stdin.flush()
        out, _ = follow.communicate(timeout=scaled(90))
        if answer == "l":
            assert follow.returncode == 0 and "gpuslice run stop kept" in out
            assert json.loads(platform.ok("run", "show", "kept", "--json"))["status"] == \
                "RUNNING"
        else:
            assert "stopping run stopped" in out
            assert json.loads(platform.ok("run", "show", "stopped", "--json"))["status"] == \
                "TERMINATED"
    platform.ok("run", "stop", "kept")


def _read_until(stream: IO[str], text: str) -> str:
    """What ``stream`` says up to and including ``text`` (a prompt ends with no newline)."""
    said = ""
    while not said.endswith(text):
        char = stream.read(1)
        assert char, f"the output ended before {text!r}: {said}"
        said += char
    return said
