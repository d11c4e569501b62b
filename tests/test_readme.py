"""The README and the docs stay true: the configuration reference is the settings models' own,
and the README's two set-up commands are what the Makefile and CI run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "configuration.md"

# A first read: what gpuslice is, the two commands, the walk-through, where to read on. The
# rest has a home in docs/, by reader.
README_MAX_LINES = 250


def _rows(text: str) -> set[str]:
    """The settings tables' rows: each starts with a TOML key in backquotes."""
    return {line for line in text.splitlines() if line.startswith("| `")}


def test_configuration_reference_matches_the_settings() -> None:
    printed = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "settings_reference.py")],
        capture_output=True, text=True, check=True,
    ).stdout
    expected, documented = _rows(printed), _rows(REFERENCE.read_text())
    assert expected, "tools/settings_reference.py printed no setting"
    missing, stale = expected - documented, documented - expected
    assert not missing and not stale, (
        "docs/configuration.md is out of date; paste tools/settings_reference.py's output over "
        "its tables.\nmissing:\n" + "\n".join(sorted(missing)) + "\nno longer so:\n"
        + "\n".join(sorted(stale)))


def test_the_two_setup_commands_are_make_targets() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    setup = re.search(r"^## Set up.*?^```sh\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert setup, "README.md has no '## Set up' section with a sh block"
    commands = [line.split("#")[0].strip() for line in setup.group(1).splitlines()]
    assert commands == ["make up", "make test"]
    for target in ("up", "test"):
        assert f"\n{target}:" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_a_first_read() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines: move what is not a first read to docs/")
