"""``gpuslice-mock-gpu``: simulate GPU use on a node without a GPU (the ``mock`` accelerator).

A process declares what it holds on its slice's simulated device, and the node then reports it
exactly as NVML reports a real GPU process, until the process ends: per-session figures,
``gpuslice-smi``, the watchdog and idle reclaim all see it. It exists only on mock nodes (the
in-session endpoint refuses the call elsewhere); real GPUs are measured, never declared.

    gpuslice-mock-gpu --mem 1g --util 80                  # hold it until stopped (Ctrl-C)
    gpuslice-mock-gpu --mem 1g --util 80 --seconds 600    # for ten minutes
    gpuslice-mock-gpu --mem 1g --util 80 -- python3 train.py   # train.py holds it (same pid)

From Python: ``import gpuslice_mock_gpu; gpuslice_mock_gpu.declare(2 * 1024**3, 50)``.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from typing import Any

import gpuslice_endpoint

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def declare(mem_bytes: int, utilization: int, device: int | str | None = None) -> Any:
    """This process now holds ``mem_bytes`` and keeps ``utilization`` % of the device busy
    (both 0: nothing). ``device``: node index or UUID, default the first of the slice."""
    body: dict[str, Any] = {"mem_bytes": mem_bytes, "utilization": utilization}
    if device is not None:
        body["device"] = device
    return gpuslice_endpoint.call("POST", "/v1/mock/gpu", body)


def parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size; use e.g. 512m, 1g, 1.5GiB")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuslice-mock-gpu",
        description="Simulate GPU memory and utilization on a node without a GPU.",
    )
    parser.add_argument("--mem", default="0", help="GPU memory to hold, e.g. 512m or 2g.")
    parser.add_argument("--util", type=int, default=0, help="Percent of the device busy.")
    parser.add_argument("--device", help="Node index or UUID (default: your slice's first).")
    parser.add_argument("--seconds", type=float, help="Hold it this long (default: until "
                        "stopped).")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- COMMAND: run it holding the load (it keeps this pid).")
    args = parser.parse_args(argv)
    try:
        mem = parse_size(args.mem)
    except ValueError as exc:
        parser.error(f"--mem: {exc}")
    device: int | str | None = args.device
    if isinstance(device, str) and device.isdigit():
        device = int(device)
    try:
        held = declare(mem, args.util, device)
    except gpuslice_endpoint.EndpointError as exc:
        print(f"gpuslice-mock-gpu: {exc}", file=sys.stderr)
        return 1
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command:
        os.execvp(command[0], command)  # the same process: the load goes on with it
    print(f"gpuslice-mock-gpu: pid {held['pid']} holds {mem} bytes and {args.util}% of "
          f"{held['device']} (simulated)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if args.seconds is not None:
            time.sleep(args.seconds)
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0
