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
import gpuslice_smi_fields
import gpuslice_smi_query
import gpuslice_smi_xml

MiB = 1024**2
COLUMNS = (32, 23, 21, 5)  # name, slice, memory, utilisation
WIDTH = sum(COLUMNS) + 3 * len(COLUMNS) + 1


def main(prog: str, argv: list[str] | None = None) -> int:
    args = _parser(prog).parse_args(argv)
    if args.help_query_gpu or args.help_query_compute_apps:
        fields, switch = ((gpuslice_smi_fields.GPU_FIELDS, "--query-gpu") if args.help_query_gpu
                          else (gpuslice_smi_fields.APP_FIELDS, "--query-compute-apps"))
        print("\n".join(gpuslice_smi_fields.help_lines(fields, switch)))
        return 0
    if args.history is not None:
        return _history(prog, args.history, args.step, args.json)
    try:
        header, units = (gpuslice_smi_query.parse_format(args.format) if args.format
                         else (True, True))
        if (args.query_gpu or args.query_compute_apps) and not args.format:
            raise gpuslice_smi_query.QueryError(
                '"--format" is required with a query: use --format=csv[,noheader][,nounits].')
        return _loop(prog, args, header, units)
    except gpuslice_smi_query.QueryError as exc:
        print(exc, end="\n\n")  # nvidia-smi words it on stdout, then an empty line
        return gpuslice_smi_query.EXIT_BAD_ARGUMENT
    except KeyboardInterrupt:
        return 0  # -l runs until stopped, as nvidia-smi's does


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Show this session's GPU slice and what it uses of it, "
        "in nvidia-smi's formats (-L, -q, -q -x, --query-gpu, --query-compute-apps).")
    parser.add_argument("-L", "--list-gpus", action="store_true", help="One line per GPU.")
    parser.add_argument("-q", "--query", action="store_true", help="The detailed report.")
    parser.add_argument("-x", "--xml-format", action="store_true",
                        help="-q as nvidia-smi's XML report (nvidia_smi_log).")
    parser.add_argument("--query-gpu", metavar="FIELDS",
                        help="Comma-separated fields, e.g. memory.used,memory.total.")
    parser.add_argument("--query-compute-apps", metavar="FIELDS",
                        help="This session's GPU processes, e.g. pid,used_memory.")
    parser.add_argument("--format", metavar="csv[,noheader][,nounits]",
                        help="Output format of a query (CSV only).")
    parser.add_argument("--help-query-gpu", action="store_true",
                        help="The fields --query-gpu accepts (all that nvidia-smi lists).")
    parser.add_argument("--help-query-compute-apps", action="store_true",
                        help="The fields --query-compute-apps accepts.")
    parser.add_argument("-i", "--id", help="Only these GPUs: indexes in the slice or UUIDs, "
                        "comma-separated.")
    parser.add_argument("-l", "--loop", type=int, metavar="SEC",
                        help="Print again every SEC seconds until interrupted.")
    parser.add_argument("--json", action="store_true", help="Print JSON for scripts.")
    parser.add_argument("--history", nargs="?", const="1h", metavar="SINCE",
                        help="This session's usage over time, e.g. 30m, 6h, 7d (default 1h).")
    parser.add_argument("--step", type=int, help="--history: seconds per line (multiple of 60).")
    return parser


def _loop(prog: str, args: argparse.Namespace, header: bool, units: bool) -> int:
    """Print once, or every ``-l`` seconds (a query's header only the first time)."""
    if args.loop is not None and args.loop < 1:
        raise gpuslice_smi_query.QueryError(f'Invalid value "{args.loop}" for -l: '
                                            "use a whole number of seconds, 1 or more.")
    while True:
        status = _once(prog, args, header, units)
        if args.loop is None or status != 0:
            return status
        header = False
        sys.stdout.flush()
        time.sleep(args.loop)


def _once(prog: str, args: argparse.Namespace, header: bool, units: bool) -> int:
    try:
        allocation = _allocation()
    except (OSError, ValueError) as exc:
        print(f"{prog}: cannot read this session's allocation ({exc})", file=sys.stderr)
        return 1
    usage, note = _usage()
    found = _selected(gpuslice_smi_query.gpus(allocation, usage), args.id)
    if args.query_gpu:
        lines = gpuslice_smi_query.query_gpus(found, args.query_gpu, header, units)
    elif args.query_compute_apps:
        lines = gpuslice_smi_query.query_apps(found, (usage or {}).get("processes", []),
                                              args.query_compute_apps, header, units)
    elif args.xml_format:
        lines = gpuslice_smi_xml.report(found, (usage or {}).get("processes", []))
    elif args.query:
        lines = gpuslice_smi_query.report(found, allocation.get("accelerator") == "mock")
    elif args.list_gpus:
        lines = gpuslice_smi_query.list_gpus(found)
    elif args.json:
        lines = [json.dumps({"allocation": allocation, "usage": usage, "note": note}, indent=2)]
    else:
        _print_table(prog, allocation, usage, note)
        lines = []
    for line in lines:
        print(line)
    return 0


def _selected(found: list[dict[str, Any]], wanted: str | None) -> list[dict[str, Any]]:
    if wanted is None:
        return found
    chosen = []
    for one in (w.strip() for w in wanted.split(",")):
        match = [g for g in found if one in (str(g["index"]), g["uuid"])]
        if not match:
            raise gpuslice_smi_query.QueryError(
                f'No GPU "{one}" in this session: use an index from 0 to {len(found) - 1} '
                "or a UUID that nvidia-smi -L shows.")
        chosen += [g for g in match if g not in chosen]
    return chosen


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
