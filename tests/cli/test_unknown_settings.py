"""`manager serve`, `agent serve` and `up` alike refuse a misspelt setting, in a variable or in
the file, in one line naming the closest setting (issue 41, "Also"), before doing anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.waits import scaled

from .conftest import GPUSLICE


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    return env | {"HOME": str(tmp_path), "GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                  "GPUSLICE_AGENT_DATA_DIR": str(tmp_path / "agent"),
                  "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json"),
                  "GPUSLICE_TEST_NOT_A_SETTING": "1"} | extra


@pytest.mark.parametrize(("command", "variable", "closest"), [
    (["manager", "serve"], "GPUSLICE_SCHEDULER__POLCY", "GPUSLICE_SCHEDULER__POLICY"),
    (["agent", "serve"], "GPUSLICE_AGENT_HARD_CAPS__MODDE", "GPUSLICE_AGENT_HARD_CAPS__MODE"),
    (["up"], "GPUSLICE_SCHEDULER__POLCY", "GPUSLICE_SCHEDULER__POLICY"),
    (["up"], "GPUSLICE_AGENT_RESERVED_CPUS", "GPUSLICE_AGENT_RESERVED_CPU"),
])
def test_a_misspelt_variable_stops_the_start_in_one_line(
    tmp_path: Path, command: list[str], variable: str, closest: str,
) -> None:
    args = [*command, "--port", str(free_port())] if command != ["agent", "serve"] else command
    if command == ["up"]:
        args += ["--data-dir", str(tmp_path / "up")]
    done = subprocess.run([GPUSLICE, *args], env=_env(tmp_path, **{variable: "1"}),
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and f"unknown setting {variable} in the environment; " \
        f"did you mean {closest}?" in line, line


def test_an_unknown_key_in_a_section_of_the_file_stops_the_manager(tmp_path: Path) -> None:
    config = tmp_path / "manager.toml"
    config.write_text('[auth]\nlogin_windw = 60\n')
    done = subprocess.run([GPUSLICE, "manager", "serve", "--config", str(config), "--port",
                           str(free_port())], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=scaled(60))
    assert (done.returncode, done.stderr) == (2, (
        f"error: manager settings: unknown setting auth.login_windw in {config}; did you "
        "mean auth.login_window?\n"))
