"""`gpuslice up --config FILE` (issue 42): the manager's settings file, as `manager serve
--config` takes it, so one machine can set `auth.*` (and SSO); a bad file stops `up` in one line
naming the setting and what it may be, before anything starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuslice.cli.output import CliError
from gpuslice.cli.up import UpOptions, up_settings
from tests.ports import free_port
from tests.waits import scaled

from .conftest import GPUSLICE


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("GPUSLICE_")]:
        monkeypatch.delenv(name)


def _options(tmp_path: Path, text: str) -> UpOptions:
    config = tmp_path / "lab.toml"
    config.write_text(text)
    return UpOptions(data_dir=tmp_path / "data", host="127.0.0.1", port=8080, mock_gpus=[],
                     fgpu_per_gpu="2", node_name=None, config=config)


def test_up_runs_the_manager_with_the_files_settings(tmp_path: Path) -> None:
    settings = up_settings(_options(tmp_path, "[auth]\ncli_token_idle = 600\n"
                                              'admin_username = "root_admin"\n'))
    assert (settings.auth.cli_token_idle, settings.auth.admin_username) == (600, "root_admin")
    # up's own options still hold beside the file's
    assert settings.data_dir == tmp_path / "data" and str(settings.nodes.fgpu_per_gpu) == "2"


@pytest.mark.parametrize(("text", "message"), [
    ("[auth]\ncli_token_idle = 5\n",
     "auth.cli_token_idle: Input should be greater than or equal to 60 (got 5)"),
    ('data_dir = "/elsewhere"\n',
     "data_dir is --data-dir's to say for gpuslice up: remove it from the file"),
])
def test_a_bad_file_is_one_line_naming_the_setting(
    tmp_path: Path, text: str, message: str
) -> None:
    options = _options(tmp_path, text)
    with pytest.raises(CliError) as caught:
        up_settings(options)
    assert str(caught.value) == f"--config {options.config}: {message}"
    assert caught.value.exit_code == 2


def test_up_stops_on_a_bad_file_before_it_starts(tmp_path: Path) -> None:
    config = tmp_path / "lab.toml"
    config.write_text("[auth]\ncli_token_max = \"long\"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    done = subprocess.run(
        [GPUSLICE, "up", "--config", str(config), "--data-dir", str(tmp_path / "up"),
         "--port", str(free_port())],
        env=env | {"HOME": str(tmp_path), "GPUSLICE_CLIENT_CONFIG": str(tmp_path / "c.json")},
        capture_output=True, text=True, timeout=scaled(60), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        f"error: --config {config}: auth.cli_token_max: Input should be a valid integer, "
        "unable to parse string as an integer (got 'long')\n")
