"""``gpuslice-run``: what a ``gpuslice run`` session runs around the user's script.

It runs the script in the run's code directory (as uploaded, in the owner's ``runs`` folder)
without changing it (the framework hook applies the slice when PyTorch, TensorFlow or JAX is
imported), passes signals on (a stop reaches the script), and when the script succeeds saves
its save directory to the model store under the run's name (``gpuslice-save``). It exits with
the script's exit code, so the session's result is the script's; a save that fails after a
successful script is a failure (exit code 70), since the model was the point. Standard
library only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from types import FrameType

import gpuslice_endpoint
import gpuslice_save

SAVE_FAILED = 70  # EX_SOFTWARE: the script worked, the platform could not keep its output
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuslice-run",
                                     description="Run a training script, then save its output.")
    parser.add_argument("--dir", required=True, help="The run's code directory.")
    parser.add_argument("--save-dir", default="output", help="Saved when the script succeeds.")
    parser.add_argument("--model", required=True, help="The model's name (the run's).")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the script's argv.")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    try:
        os.chdir(args.dir)
    except OSError as exc:
        return _say(f"cannot enter {args.dir}: {exc.strerror}", 2)
    _say(f"running {shlex.join(command)} in {args.dir}")
    started = time.monotonic()
    code = _run(command)
    took = _duration(time.monotonic() - started)
    if code != 0:
        return _say(f"the script exited with code {code} after {took}; "
                    f"{args.save_dir}/ was not saved", code)
    if not os.path.isdir(args.save_dir) or not os.listdir(args.save_dir):
        return _say(f"the script succeeded in {took}; no {args.save_dir}/ to save", 0)
    try:
        saved = gpuslice_save.save(args.save_dir, args.model, say=_say)
    except (gpuslice_save.SaveError, gpuslice_endpoint.EndpointError) as err:
        return _say(f"the script succeeded in {took}, but saving {args.save_dir}/ failed: "
                    f"{err}", SAVE_FAILED)
    return _say(f"the script succeeded in {took}; saved {args.save_dir}/ as model "
                f"{saved.name} ({saved.files} file(s))", 0)


def _run(command: list[str]) -> int:
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        _say(f"cannot run {command[0]}: {exc.strerror}")
        return 127

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    code = child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


def _say(line: str, code: int = 0) -> int:
    print(f"gpuslice-run: {line}", file=sys.stderr, flush=True)
    return code


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"
