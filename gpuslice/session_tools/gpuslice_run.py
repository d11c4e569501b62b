"""``gpuslice-run``: what a ``gpuslice run`` session runs around the user's script.

It runs the script in the run's code directory (as uploaded, in the owner's ``runs`` folder)
without changing it (the framework hook applies the slice when PyTorch, TensorFlow or JAX is
imported), passes signals on (a stop, a time limit's warning reach the script), and when the
script succeeds saves its save directory to the model store under the run's name
(``gpuslice-save``). It exits with
the script's exit code, so the session's result is the script's; a save that fails after a
successful script is a failure (exit code 70), since the model was the point.

A run that is preempted gets SIGTERM (passed on to the script) and
``GPUSLICE_PREEMPT_GRACE_S`` seconds before SIGKILL to write a checkpoint into its save
directory; it starts again from the queue in the same code directory, so the script finds its
checkpoint where it left it.

The platform's own downtime never costs the output: while the node's agent or the manager
cannot answer (stopped, restarting, unreachable), it says so in its log ("waiting for the
manager to save output/") and tries again, doubling its wait up to ``MAX_DELAY``, for up to
``--save-patience`` seconds; the run ends SUCCESS once saved. It tells the manager how long
the script itself ran (``POST /v1/run/saving``), so the run's duration never counts the wait.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

import gpuslice_endpoint
import gpuslice_save

SAVE_FAILED = 70  # EX_SOFTWARE: the script worked, the platform could not keep its output
PATIENCE = 6 * 3600  # seconds to wait for the platform before giving the output up
FIRST_DELAY, MAX_DELAY = 1.0, 30.0
# SIGUSR1/2: a time limit's warning (``sessions.time_limit_signal``), for the script to save
# its work; unhandled here it would end this wrapper, and the run with it
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
T = TypeVar("T")


class _GaveUp(Exception):
    """The platform stayed away longer than the patience allows."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuslice-run",
                                     description="Run a training script, then save its output.")
    parser.add_argument("--dir", required=True, help="The run's code directory.")
    parser.add_argument("--save-dir", default="output", help="Saved when the script succeeds.")
    parser.add_argument("--model", required=True, help="The model's name (the run's).")
    parser.add_argument("--save-patience", type=float, default=PATIENCE,
                        help="Seconds to wait for the platform to save the output.")
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
    if os.path.isdir(args.save_dir) and os.listdir(args.save_dir):
        # a run started again (preempted, then back from the queue): its output is in its
        # folder still, with whatever checkpoint the script left there
        _say(f"{args.save_dir}/ holds {len(os.listdir(args.save_dir))} entries from before "
             "(a checkpoint the script can resume from)")
    started = time.monotonic()
    code = _run(command)
    ran = time.monotonic() - started
    took = _duration(ran)
    if code != 0:
        return _say(f"the script exited with code {code} after {took}; "
                    f"{args.save_dir}/ was not saved", code)
    if not os.path.isdir(args.save_dir) or not os.listdir(args.save_dir):
        try:  # the run's duration, even with nothing to save
            _patiently(lambda: _tell_saving(ran, 0.0), args.save_dir, args.save_patience)
        except (gpuslice_endpoint.EndpointError, _GaveUp) as err:
            _say(f"the run's duration could not be told ({err})")
        return _say(f"the script succeeded in {took}; no {args.save_dir}/ to save", 0)
    return _save(args, ran)


def _save(args: argparse.Namespace, ran: float) -> int:
    took = _duration(ran)
    waiting_since = time.monotonic()
    try:
        _patiently(lambda: _tell_saving(ran, time.monotonic() - waiting_since), args.save_dir,
                   args.save_patience)
        saved = _patiently(lambda: gpuslice_save.save(args.save_dir, args.model, say=_say),
                           args.save_dir, args.save_patience - (time.monotonic() - waiting_since))
    except (gpuslice_save.SaveError, gpuslice_endpoint.EndpointError, _GaveUp) as err:
        return _say(f"the script succeeded in {took}, but saving {args.save_dir}/ failed: "
                    f"{err}", SAVE_FAILED)
    model = f"{saved.name}:{saved.version}" if saved.version else saved.name
    return _say(f"the script succeeded in {took}; saved {args.save_dir}/ as model "
                f"{model} ({saved.files} file(s))", 0)


def _patiently(action: Callable[[], T], save_dir: str, patience: float) -> T:
    """``action()``, tried again while the platform is away, for at most ``patience`` s."""
    deadline = time.monotonic() + patience
    delay = FIRST_DELAY
    while True:
        try:
            return action()
        except gpuslice_endpoint.EndpointError as err:
            if not err.platform_away:
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise _GaveUp(f"the platform stayed away for over {_duration(patience)} "
                              f"(last: {err}); it is still in {save_dir}/") from None
            wait = min(delay * random.uniform(0.8, 1.2), left)
            _say(f"waiting for the manager to save {save_dir}/ ({err}); trying again in "
                 f"{wait:.0f}s")
            time.sleep(wait)
            delay = min(delay * 2, MAX_DELAY)


def _tell_saving(ran: float, waited: float) -> None:
    """Tell the manager the script's own time (the run's duration) and that saving starts."""
    try:
        gpuslice_endpoint.call("POST", "/v1/run/saving",
                               {"script_s": round(ran, 3), "waited_s": round(waited, 3)})
    except gpuslice_endpoint.EndpointError as err:
        if err.platform_away:
            raise
        # an agent of an earlier version has no such call: saving matters more than this
        _say(f"the run's duration could not be told ({err})")


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
    for signum in _FORWARDED:  # a stop while saving stops this process now
        signal.signal(signum, signal.SIG_DFL)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


def _say(line: str, code: int = 0) -> int:
    print(f"gpuslice-run: {line}", file=sys.stderr, flush=True)
    return code


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"
