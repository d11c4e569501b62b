"""README.md stays true: its configuration reference is the settings models' own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_configuration_reference_matches_the_settings():
    printed = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "settings_reference.py")],
        capture_output=True, text=True, check=True,
    ).stdout
    readme = (ROOT / "README.md").read_text()
    missing = [line for line in printed.splitlines() if line.startswith("| `")
               and line not in readme]
    assert not missing, "README.md is out of date; run tools/settings_reference.py:\n" + (
        "\n".join(missing))


def test_the_two_setup_commands_are_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    readme = (ROOT / "README.md").read_text()
    for target in ("up", "test"):
        assert f"make {target}" in readme
        assert f"\n{target}:" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
