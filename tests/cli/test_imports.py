"""The CLI imports what a command uses and nothing else (the rule in `gpuslice.cli`).

Each check runs in a fresh interpreter and looks at ``sys.modules`` when it exits: a module that
slows every start down (Docker's client, the manager, the agent, image building; for `--help`
also httpx and pydantic) must not come back through a stray import. No timing here: that is
bench/cli_start.py's job.
"""

from __future__ import annotations

import json

from gpuslice.cli.main import COMMANDS

from .conftest import Manager
from .loaded_modules import BACK_ENDS, found_modules, loaded_by_import, run_cli

# What a command that calls the manager loads, and `--help` must not.
CLIENT = ("httpx", "pydantic", "gpuslice.client.client", "gpuslice.common.schemas")


def test_importing_the_entry_point_loads_no_command() -> None:
    loaded = loaded_by_import("gpuslice.cli.main")
    assert found_modules(loaded, BACK_ENDS + CLIENT + _command_modules()) == []


def test_help_loads_no_command() -> None:
    done, loaded = run_cli(["--help"])
    assert "session" in done.stdout
    assert found_modules(loaded, BACK_ENDS + CLIENT + _command_modules()) == []


def test_session_list_json_loads_the_session_commands_and_the_client_only(
    manager: Manager,
) -> None:
    done, loaded = run_cli(["session", "list", "--json"], manager.env)
    assert [s["name"] for s in json.loads(done.stdout)["items"]] == ["idle-3", "idle-2", "idle-1"]
    others = tuple(m for m in _command_modules() if m != "gpuslice.cli.session")
    # the schemas too: --json prints the manager's answer without building the models
    assert found_modules(loaded, BACK_ENDS + others + ("gpuslice.common.schemas",)) == []
    assert "gpuslice.cli.session" in loaded
    # nor httpx's own command-line tool, nor typer's option checks through pydantic
    assert found_modules(loaded, ("httpx._main", "pygments", "pydantic")) == []


def test_image_list_loads_no_image_building(manager: Manager) -> None:
    done, loaded = run_cli(["image", "list", "--json"], manager.env)
    assert json.loads(done.stdout) is not None
    assert found_modules(loaded, BACK_ENDS) == []


def _command_modules() -> tuple[str, ...]:
    return tuple(entry.target.partition(":")[0] for entry in COMMANDS.values())
