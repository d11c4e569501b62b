"""`gpuslice usage`, `top`, `session stats` and the reclaim options of `admin policy set`, as a
user runs them against a real manager: one clear line for bad input, nothing heavy imported."""

from __future__ import annotations

import csv
import io
import json

from .conftest import Manager
from .loaded_modules import BACK_ENDS, found_modules, run_cli


def test_usage_stats_and_top(manager: Manager) -> None:
    done = manager.cli("usage", "--csv", "--since", "30d")
    assert done.returncode == 0, done.stderr
    assert next(csv.reader(io.StringIO(done.stdout))) == [
        "user", "day", "sessions", "fgpu_hours", "gpu_mem_gib_hours", "cpu_hours",
        "mem_gib_hours", "hours_measured"]
    bad = manager.cli("usage", "--since", "last week")
    assert bad.returncode == 2 and bad.stderr.startswith("error: since: 'last week' is neither")
    assert len(bad.stderr.splitlines()) == 1

    done = manager.cli("session", "stats", "idle-1")
    assert done.returncode == 0, done.stderr
    assert "now      not measured yet" in done.stdout and "0 fGPU-hours" in done.stdout
    found = json.loads(manager.cli("session", "stats", "idle-1", "--json").stdout)
    assert found["name"] == "idle-1" and found["points"] == [] and found["now"] is None
    bad = manager.cli("session", "stats", "idle-1", "--step", "90")
    assert bad.returncode == 2 and "multiple of 60" in bad.stderr

    done = manager.cli("top", "--once")
    assert done.returncode == 0 and "gpuslice top" in done.stdout
    assert json.loads(manager.cli("top", "--json").stdout)["nodes"] == []
    for command in (["usage", "--json"], ["top", "--json"]):  # nothing heavy imported
        _done, loaded = run_cli(command, manager.env)
        assert found_modules(loaded, BACK_ENDS) == []


def test_policy_set_takes_reclaim_rules(manager: Manager) -> None:
    done = manager.cli("admin", "policy", "set", "admin", "--idle-window", "30m",
                       "--idle-gpu-below", "1", "--idle-activity", "--max-lifetime", "8h")
    assert done.returncode == 0, done.stderr
    assert "idle 30 min (GPU < 1 % and no activity), at most 8 h" in done.stdout
    [policy] = json.loads(manager.cli("admin", "policy", "list", "--json").stdout)
    assert policy["idle"]["window"] == 1800 and policy["max_lifetime"] == 8 * 3600
    for args, says in ((["--idle-gpu-below", "1"], "need a window"),
                       (["--idle-window", "soon", "--idle-gpu-below", "1"], "not a duration"),
                       (["--idle-window", "5m"], "at least one of"),
                       (["--idle-window", "5m", "--idle-cpu-below", "0"], "1 to 100")):
        bad = manager.cli("admin", "policy", "set", "admin", *args)
        assert bad.returncode == 2 and says in bad.stderr, (args, bad.stderr)

