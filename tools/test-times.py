#!/usr/bin/env python3
"""Sums up where a test run's time went, from the JSON lines tests/timings.py writes.

    python3 tools/test-times.py tests/artifacts/times [--top 25]

Per lane: how many tests, their wall time added up (more than the lane's own wall time when
it runs in several processes), the CPU time of the test processes and of the children they
reaped; then the files and the tests that took longest, each with its CPU share (a low share
means waiting: on a container, a timer, or a busy machine).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def _load(folder: Path) -> list[dict[str, object]]:
    records = []
    for path in sorted(folder.glob("times-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _cpu(record: dict[str, object]) -> float:
    return float(record["cpu"]) + float(record["children_cpu"])  # type: ignore[arg-type]


def _row(name: str, count: int, wall: float, cpu: float) -> str:
    share = f"{100 * cpu / wall:.0f}%" if wall else "-"
    return f"| {name} | {count} | {wall:.0f} | {cpu:.0f} | {share} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    records = _load(args.folder)
    if not records:
        raise SystemExit(f"no times-*.jsonl in {args.folder}: run the tests with "
                         "GPUSLICE_TEST_TIMES set to that folder")
    header = ["| {} | tests | wall s | CPU s | CPU/wall |", "|---|---:|---:|---:|---:|"]

    lanes: dict[str, list[dict[str, object]]] = defaultdict(list)
    for record in records:
        lanes[str(record["lane"]) or "-"].append(record)
    print(header[0].format("lane"), header[1], sep="\n")
    for lane, items in sorted(lanes.items()):
        print(_row(lane, len(items), sum(float(r["wall"]) for r in items),  # type: ignore[arg-type]
                   sum(_cpu(r) for r in items)))

    files: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
    for record in records:
        files[(str(record["lane"]), str(record["test"]).split("::")[0])].append(record)
    ranked = sorted(files.items(), key=lambda kv: -sum(float(r["wall"]) for r in kv[1]))  # type: ignore[arg-type]
    print(f"\nThe {args.top} files that took longest (lane: file)\n")
    print(header[0].format("file"), header[1], sep="\n")
    for (lane, name), items in ranked[: args.top]:
        print(_row(f"{lane}: {name}", len(items),
                   sum(float(r["wall"]) for r in items), sum(_cpu(r) for r in items)))  # type: ignore[arg-type]

    slowest = sorted(records, key=lambda r: -float(r["wall"]))  # type: ignore[arg-type]
    print(f"\nThe {args.top} tests that took longest\n")
    print(header[0].format("test"), header[1], sep="\n")
    for record in slowest[: args.top]:
        print(_row(f"{record['lane']}: {record['test']}", 1, float(record["wall"]),  # type: ignore[arg-type]
                   _cpu(record)))


if __name__ == "__main__":
    main()
