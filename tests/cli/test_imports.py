"""The CLI imports what a command uses and nothing else (the rule in `gpuslice.cli`).

Each check runs in a fresh interpreter and looks at ``sys.modules`` when it exits: a module that
slows every start down (Docker's client, the manager, the agent, image building; for `--help`
also httpx and pydantic) must not come back through a stray import. No timing here: that is
bench/cli_start.py's job.
"""

from __future__ import annotations

import json
import subprocess
import sys

from gpuslice.cli.main import COMMANDS
from tests.waits import scaled

from .conftest import Manager

# Back ends that only `up`, `manager serve`, `agent serve` and `image build` may load.
BACK_ENDS = ("aiodocker", "aiohttp", "gpuslice.manager", "gpuslice.agent", "gpuslice.imagebuild",
             "fastapi", "sqlalchemy", "uvicorn")
# What a command that calls the manager loads, and `--help` must not.
CLIENT = ("httpx", "pydantic", "gpuslice.client.client", "gpuslice.common.schemas")

# Runs `gpuslice ARGS` in this interpreter and writes the loaded modules to stderr at exit.
_RUN = """
import atexit, json, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + json.dumps(
    sorted(name for name, module in sys.modules.items() if module is not None))))
sys.argv[0] = "gpuslice"
from gpuslice.cli.main import app
app()
"""


def test_importing_the_entry_point_loads_no_command() -> None:
    loaded = _loaded_by_import("gpuslice.cli.main")
    assert _found(loaded, BACK_ENDS + CLIENT + _command_modules()) == []


def test_help_loads_no_command() -> None:
    done, loaded = _run_cli(["--help"])
    assert "session" in done.stdout
    assert _found(loaded, BACK_ENDS + CLIENT + _command_modules()) == []


def test_session_list_json_loads_the_session_commands_and_the_client_only(
    manager: Manager,
) -> None:
    done, loaded = _run_cli(["session", "list", "--json"], manager.env)
    assert [s["name"] for s in json.loads(done.stdout)["items"]] == ["idle-3", "idle-2", "idle-1"]
    others = tuple(m for m in _command_modules() if m != "gpuslice.cli.session")
    # the schemas too: --json prints the manager's answer without building the models
    assert _found(loaded, BACK_ENDS + others + ("gpuslice.common.schemas",)) == []
    assert "gpuslice.cli.session" in loaded
    # nor httpx's own command-line tool, nor typer's option checks through pydantic
    assert _found(loaded, ("httpx._main", "pygments", "pydantic")) == []


def test_image_list_loads_no_image_building(manager: Manager) -> None:
    done, loaded = _run_cli(["image", "list", "--json"], manager.env)
    assert json.loads(done.stdout) is not None
    assert _found(loaded, BACK_ENDS) == []


def _command_modules() -> tuple[str, ...]:
    return tuple(entry.target.partition(":")[0] for entry in COMMANDS.values())


def _run_cli(args: list[str], env: dict[str, str] | None = None,
             ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run([sys.executable, "-c", _RUN, *args], env=env, capture_output=True,
                          text=True, timeout=scaled(60), check=False)
    assert done.returncode == 0, done.stderr
    report = done.stderr.rpartition("\nMODULES ")[2]
    return done, set(json.loads(report))


def _loaded_by_import(module: str) -> set[str]:
    code = (f"import {module}, json, sys; "
            "print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=scaled(60), check=True)
    return set(json.loads(done.stdout))


def _found(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` (packages with their submodules) that are in ``loaded``."""
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))
