"""Commands load when they run, and the command line looks as if they had all been loaded."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

from gpuslice.cli.main import COMMANDS, app


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_root_help_line_of_a_command_is_its_own(name: str) -> None:
    command = COMMANDS[name].load(name)
    assert command.name == name
    assert COMMANDS[name].help == inspect.cleandoc(command.help or "").split("\n\n")[0]


def test_the_root_help_lists_every_command_in_order() -> None:
    listed = CliRunner().invoke(app, ["--help"], terminal_width=120)
    assert listed.exit_code == 0
    lines = [line for line in listed.output.splitlines() if line.startswith("│ ")]
    names = [line.split()[1] for line in lines if line.split()[1] in COMMANDS]
    assert names == list(COMMANDS)


def test_a_group_with_one_command_stays_a_group() -> None:
    done = CliRunner().invoke(app, ["node", "list", "--help"])
    assert done.exit_code == 0 and "Usage: gpuslice node list" in done.output


def test_a_mistyped_command_gets_a_suggestion() -> None:
    done = CliRunner().invoke(app, ["sesion", "list"])
    assert done.exit_code == 2 and "Did you mean 'session'" in done.output


def _groups(command: object, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    subs = getattr(command, "commands", {})
    return ([path] if subs else []) + [
        found for name, sub in subs.items() for found in _groups(sub, (*path, name))]


@pytest.mark.parametrize("name", [n for n in COMMANDS if hasattr(COMMANDS[n].load(n),
                                                                  "commands")])
def test_a_groups_listing_flows_each_command_line_to_the_width(name: str) -> None:
    """A docstring's line breaks are not the terminal's: on a wide terminal, every command
    of every group (nested ones too) has its first paragraph on one line."""
    for path in _groups(COMMANDS[name].load(name), (name,)):
        listed = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
        assert listed.exit_code == 0, listed.output
        panel = listed.output.split("─ Commands ─", 1)[1].split("╰", 1)[0]
        rows = [line.strip("│ ").rstrip() for line in panel.splitlines()[1:] if line.strip()]
        continued = [row for row in rows if row.startswith(" ") or len(row.split()) < 2]
        assert rows and not continued, f"gpuslice {' '.join(path)} --help:\n{listed.output}"
