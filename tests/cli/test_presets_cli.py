"""`gpuslice admin preset …` (issue 34, finding 6): the presets the launch dialog offers, as an
admin manages them from the CLI; errors are one line."""

from __future__ import annotations

import json

from .conftest import Manager


def test_an_admin_manages_presets_from_the_cli(manager: Manager) -> None:
    made = manager.cli("admin", "preset", "create", "medium", "--cpu", "2", "--mem", "8g")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "created preset medium: 2 CPU, 8 GiB, 0 fGPU"
    made = manager.cli("admin", "preset", "set", "medium", "--default", "--json")
    assert made.returncode == 0 and json.loads(made.stdout)["default"] is True, made.stderr
    listed = json.loads(manager.cli("admin", "preset", "list", "--json").stdout)
    assert [(p["name"], p["cpu"], p["default"]) for p in listed] == [
        ("medium", 2, True), ("small", 0.25, False)]
    table = manager.cli("admin", "preset", "list").stdout
    assert "medium" in table and "8 GiB" in table and "yes" in table
    assert manager.cli("admin", "preset", "delete", "medium").returncode == 0
    listed = json.loads(manager.cli("admin", "preset", "list", "--json").stdout)
    assert [p["name"] for p in listed] == ["small"]


def test_bad_preset_values_are_one_line(manager: Manager) -> None:
    bad = manager.cli("admin", "preset", "create", "big", "--cpu", "lots", "--mem", "1g")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1, \
        bad.stderr
    assert "cpu" in bad.stderr.lower()
    missing = manager.cli("admin", "preset", "set", "nope", "--cpu", "1")
    assert missing.returncode != 0 and "no preset 'nope'" in missing.stderr, missing.stderr
