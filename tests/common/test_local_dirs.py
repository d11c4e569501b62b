"""The data directory lock and checks (`gpuslice.common.local_dirs`): one holder at a time,
none left behind by a holder killed with SIGKILL, one sentence for a directory that cannot
be used."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuslice.common.local_dirs import Busy, DirLock, DirProblem, prepare_dir

HOLD = """
import sys, time
from pathlib import Path
from gpuslice.common.local_dirs import DirLock
DirLock(Path(sys.argv[1])).acquire(port=8080)
print("held", flush=True)
time.sleep(60)
"""


def hold_in_another_process(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_live_holder_refuses_the_next_one_naming_itself(tmp_path: Path) -> None:
    path = tmp_path / "up.lock"
    holder = hold_in_another_process(path)
    try:
        with pytest.raises(Busy) as busy:
            DirLock(path).acquire(port=9090)
        assert busy.value.holder == {"pid": holder.pid, "port": 8080}
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_killed_with_sigkill_leaves_no_lock_only_its_trace(tmp_path: Path) -> None:
    path = tmp_path / "up.lock"
    holder = hold_in_another_process(path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = DirLock(path)
    assert lock.acquire(port=9090) == {"pid": holder.pid, "port": 8080}  # the trace
    assert json.loads(path.read_text()) == {"pid": os.getpid(), "port": 9090}
    lock.release()
    assert path.read_text() == ""  # a clean stop leaves no trace
    with DirLock(path) as again:
        assert again.acquire() is None


def test_a_directory_that_cannot_be_used_is_one_sentence(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(DirProblem) as problem:
        prepare_dir(a_file, "--data-dir")
    assert str(problem.value) == f"{a_file} is not a directory: pick another with --data-dir"
    with pytest.raises(DirProblem) as problem:
        prepare_dir(a_file / "below", "--data-dir")
    assert str(problem.value) == (f"the data directory {a_file / 'below'} is inside a file, "
                                  "not a directory: pick another with --data-dir")
    with pytest.raises(DirProblem) as problem:
        prepare_dir(tmp_path / "ok", "--data-dir", min_free=2**62)
    assert "is full (" in str(problem.value) and "free some space" in str(problem.value)
    made = prepare_dir(tmp_path / "ok", "--data-dir")
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    assert list(made.iterdir()) == []  # the write test left nothing
