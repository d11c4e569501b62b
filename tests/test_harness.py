"""The suite's own harness: what tests rely on whatever starts them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
CHILD_SEES_CTRL_C = '''
import signal, subprocess, sys

def test_a_child_gets_ctrl_c_as_from_a_terminal():
    said = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
        capture_output=True, text=True, check=True).stdout
    assert "default_int_handler" in said, said
'''


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_tests_started_with_ctrl_c_ignored_still_press_it_on_their_children(
    tmp_path: Path,
) -> None:
    """A CI runner may start the suite as a background job, with SIGINT ignored, which every
    child inherits: the tests that press Ctrl-C on the CLI would hang. The conftest undoes it."""
    (tmp_path / "test_child.py").write_text(CHILD_SEES_CTRL_C)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
         "--confcutdir", str(ROOT / "tests"), "-c", str(ROOT / "pyproject.toml"),
         "-p", "tests.conftest", str(tmp_path / "test_child.py")],
        cwd=ROOT, capture_output=True, text=True, preexec_fn=_ignore_ctrl_c, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "GPUSLICE_TEST_TIMES"})
    assert done.returncode == 0, done.stdout + done.stderr
