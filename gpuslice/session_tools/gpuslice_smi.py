"""``gpuslice-smi``: the session's GPU slice, what the session uses of it, and its history.

It reads the slice from ``/etc/gpuslice/allocation.json`` (what the platform allocated: device,
share, memory, SMs) and asks the node's agent, through the in-session endpoint, what this
session's processes use now (``/v1/usage``: memory and utilisation per device, when measured)
and, with ``--history``, what they used over time (``/v1/usage/history``, kept by the manager).
On a node without a real GPU (the ``mock`` accelerator) it is also installed as ``nvidia-smi``
and says plainly that the GPU is simulated. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import gpuslice_endpoint

MiB = 1024**2
COLUMNS = (32, 23, 21, 5)  # name, slice, memory, utilisation
WIDTH = sum(COLUMNS) + 3 * len(COLUMNS) + 1


def main(prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Show this session's GPU slice and what it uses of it."
    )
    parser.add_argument("-L", "--list-gpus", action="store_true", help="One line per GPU.")
    parser.add_argument("--json", action="store_true", help="Print JSON for scripts.")
    parser.add_argument("--history", nargs="?", const="1h", metavar="SINCE",
                        help="This session's usage over time, e.g. 30m, 6h, 7d (default 1h).")
    parser.add_argument("--step", type=int, help="--history: seconds per line (multiple of 60).")
    args = parser.parse_args()
    if args.history is not None:
        return _history(prog, args.history, args.step, args.json)
    try:
        allocation = _allocation()
    except (OSError, ValueError) as exc:
        print(f"{prog}: cannot read this session's allocation ({exc})", file=sys.stderr)
        return 1
    usage, note = _usage()
    if args.json:
        json.dump({"allocation": allocation, "usage": usage, "note": note}, sys.stdout, indent=2)
        print()
    elif args.list_gpus:
        _print_list(allocation)
    else:
        _print_table(prog, allocation, usage, note)
    return 0


def _allocation() -> dict[str, Any]:
    path = os.environ.get("GPUSLICE_ALLOCATION_FILE", "/etc/gpuslice/allocation.json")
    with open(path, encoding="utf-8") as f:
        value = json.load(f)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _usage() -> tuple[dict[str, Any] | None, str]:
    try:
        return gpuslice_endpoint.call("GET", "/v1/usage"), ""
    except gpuslice_endpoint.EndpointError as exc:
        return None, f"usage unknown: {exc}"


def _print_list(allocation: dict[str, Any]) -> None:
    for device in allocation.get("devices", []):
        model = device.get("model") or "GPU"
        print(f"GPU {device.get('index', 0)}: {model} (UUID: {device.get('uuid')}) "
              f"[slice {device.get('fgpu')} fGPU, {_mib(device.get('memory_bytes'))}]")


def _print_table(
    prog: str, allocation: dict[str, Any], usage: dict[str, Any] | None, note: str
) -> None:
    simulated = allocation.get("accelerator") == "mock"
    print(f"{prog}  session {allocation.get('session_id', '?')}  on node "
          f"{allocation.get('node', '?')}  {time.strftime('%a %b %d %H:%M:%S %Y')}")
    devices = allocation.get("devices", [])
    rule = "+" + "-" * (WIDTH - 2) + "+"
    print(rule)
    print(_row("GPU  Name", "Slice", "Memory used / slice", "Util"))
    print("|" + "=" * (WIDTH - 2) + "|")
    used = {g.get("uuid"): g for g in (usage or {}).get("gpus", [])}
    for device in devices:
        reading = used.get(device.get("uuid"), {})
        total = device.get("device_memory_bytes")
        name = f"{device.get('model') or 'GPU'}" + (f" ({_gib(total)})" if total else "")
        mem = f"{_mib(reading.get('mem_used'))} / {_mib(device.get('memory_bytes'))}"
        util = reading.get("utilization")
        print(_row(f"{device.get('index', 0):>3}  {name}",
                   f"{device.get('fgpu')} fGPU = {_percent(device.get('fraction'))}",
                   mem, "n/a" if util is None else f"{util} %"))
        sms = f"{device.get('sm_percent')}% of its SMs"
        print(_row(f"     {device.get('uuid')}", sms, "", ""))
    if not devices:
        print(_row("No GPU in this session's allocation", "", "", ""))
    print(rule)
    if simulated:
        print("Simulated GPU: this node has no NVIDIA GPU (gpuslice's mock accelerator). The")
        print("slice is what the platform allocated; programs run on the CPU.")
    if note:
        print(note)


def _row(name: str, slice_: str, mem: str, util: str) -> str:
    a, b, c, d = COLUMNS
    return f"| {name[:a]:<{a}} | {slice_[:b]:<{b}} | {mem[:c]:>{c}} | {util[:d]:>{d}} |"


def _mib(size: object) -> str:
    return "n/a" if not isinstance(size, int) else f"{size // MiB} MiB"


def _gib(size: object) -> str:
    return "" if not isinstance(size, int) else f"{size / 1024**3:g} GiB"


def _percent(fraction: object) -> str:
    try:
        return f"{float(str(fraction)) * 100:g}%"
    except ValueError:
        return "?"


def _history(prog: str, since: str, step: int | None, as_json: bool) -> int:
    query = f"since={since}" + (f"&step={step}" if step else "")
    try:
        stats = gpuslice_endpoint.call("GET", f"/v1/usage/history?{query}")
    except gpuslice_endpoint.EndpointError as exc:
        print(f"{prog}: usage history unavailable: {exc}", file=sys.stderr)
        return 1
    if as_json:
        json.dump(stats, sys.stdout, indent=2)
        print()
        return 0
    print(f"{prog}  session {stats.get('name')}  usage since {stats.get('since')} "
          f"(one line per {stats.get('step')} s, averages; n/a: not measured)")
    print(f"{'time (UTC)':<17} {'GPU mem':>10} {'peak':>10} {'GPU util':>9} {'CPU':>7} "
          f"{'memory':>10}")
    for point in stats.get("points", []):
        util = point.get("gpu_util")
        cpu = point.get("cpu")
        print(f"{str(point.get('at', ''))[:16].replace('T', ' '):<17} "
              f"{_mib(point.get('gpu_mem')):>10} {_mib(point.get('gpu_mem_peak')):>10} "
              f"{'n/a' if util is None else f'{util:g} %':>9} "
              f"{'n/a' if cpu is None else f'{cpu:g}':>7} {_mib(point.get('mem')):>10}")
    totals = stats.get("totals", {})
    print(f"totals: {totals.get('fgpu_hours')} fGPU-hours, {totals.get('cpu_hours')} CPU-hours,"
          f" {totals.get('gpu_mem_gib_hours')} GPU-memory GiB-hours")
    return 0
