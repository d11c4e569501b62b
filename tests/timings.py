"""Where the suite's time goes: each test's wall time and CPU time, as JSON lines.

With ``GPUSLICE_TEST_TIMES`` naming a folder, every test process appends one line per test to
a file of its own there: the test's id, its lane (``GPUSLICE_TEST_LANE``), the wall time of its
setup, call and teardown together, and the CPU time spent in that time by the test process and
by the child processes it reaped (a ``gpuslice up``, the CLI, a browser). A test whose wall time
is much more than its CPU time is waiting: on a container, on a timer, or on a busy machine.
``tools/test-times.py`` sums them up per lane and per file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_FOLDER = os.environ.get("GPUSLICE_TEST_TIMES", "")
_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or report.skipped or report.nodeid not in _OUTCOMES:
        _OUTCOMES[report.nodeid] = report.outcome


def _cpu() -> tuple[float, float]:
    times = os.times()
    return time.process_time(), times.children_user + times.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _FOLDER:
        yield
        return
    start, (own, children) = time.monotonic(), _cpu()
    yield
    wall, (own_end, children_end) = time.monotonic() - start, _cpu()
    record = {
        "test": item.nodeid,
        "lane": os.environ.get("GPUSLICE_TEST_LANE", ""),
        "wall": round(wall, 3),
        "cpu": round(own_end - own, 3),
        "children_cpu": round(children_end - children, 3),
        "outcome": _OUTCOMES.pop(item.nodeid, "not run"),
    }
    folder = Path(_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"times-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
