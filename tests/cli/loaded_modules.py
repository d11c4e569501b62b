"""What a CLI run loads: each check runs in a fresh interpreter and reads ``sys.modules`` when
it exits, for the tests that hold the CLI to importing only what a command uses."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.waits import scaled

# Back ends that only `up`, `manager serve`, `agent serve` and `image build` may load.
BACK_ENDS = ("aiodocker", "aiohttp", "gpuslice.manager", "gpuslice.agent", "gpuslice.imagebuild",
             "fastapi", "sqlalchemy", "uvicorn")

# Runs `gpuslice ARGS` in this interpreter and writes the loaded modules to stderr at exit.
RUN = """
import atexit, json, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + json.dumps(
    sorted(name for name, module in sys.modules.items() if module is not None))))
sys.argv[0] = "gpuslice"
from gpuslice.cli.main import app
app()
"""


def run_cli(args: list[str], env: dict[str, str] | None = None,
            ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`gpuslice ARGS` run (it must succeed), and the modules it had loaded at exit."""
    done = subprocess.run([sys.executable, "-c", RUN, *args], env=env, capture_output=True,
                          text=True, timeout=scaled(60), check=False)
    assert done.returncode == 0, done.stderr
    report = done.stderr.rpartition("\nMODULES ")[2]
    return done, set(json.loads(report))


def loaded_by_import(module: str) -> set[str]:
    """The modules loaded once ``module`` is imported, in a fresh interpreter."""
    code = (f"import {module}, json, sys; "
            "print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=scaled(60), check=True)
    return set(json.loads(done.stdout))


def found_modules(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` (packages with their submodules) that are in ``loaded``."""
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))
