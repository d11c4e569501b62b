"""`gpuslice session create` checks its options with the manager's own schema: what it refuses
is one line naming the option, exit code 2, before anything is sent (no manager here)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuslice.cli.main import app


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--mem", "1k"], "--mem: '1k' is below the minimum 6 MiB"),
        (["--cpu", "0"], "--cpu: CPU cores must be more than zero, got 0"),
        (["--gpu", "0.333"], "--gpu: 0.333 fGPU has more than 2 decimal places"),
        (["--count", "101"], "--count: must be 100 or less, got 101"),
        (["--type", "daemon"], "--type: choose 'interactive' or 'batch', got 'daemon'"),
        (["--name", "Bad_Name"], "--name: use 1-63 lowercase letters, digits and dashes, "
                                 "starting and ending with a letter or digit"),
        (["--env", "1BAD=x"], "--env: '1BAD' is not a valid variable name"),
        (["--gpu", "0.5", "--gpu-mem", "1g"],
         "--gpu, --gpu-mem: ask for a GPU share (fGPU) or GPU memory, not both"),
        (["--type", "batch", "--command", "echo 'x"],
         "--command: no closing quotation in \"echo 'x\""),
        (["--type", "batch"], "--command: a batch session needs a command to run"),
        (["--time", "soon"],
         "--time: 'soon' is not a time limit; use e.g. 30m, 2h, 1d, 90 (minutes) or 1:30:00"),
        (["--time", "0"], "--time: must be between 1 second and 365 days"),
        (["--begin", "tomorrow"], "--begin: 'tomorrow' is not a start time; use e.g. 22:00, "
                                  "+1h, now+30m or an ISO date such as 2026-12-01T22:00"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(args: list[str], line: str) -> None:
    done = CliRunner().invoke(app, ["session", "create", *args],
                              env={"GPUSLICE_URL": "http://127.0.0.1:9"})
    assert (done.exit_code, done.stderr, done.stdout) == (2, f"error: {line}\n", "")


def test_the_help_of_a_waiting_command_says_its_exit_codes() -> None:
    for command in (["session", "create"], ["session", "logs"], ["run", "start"],
                    ["run", "logs"]):
        done = CliRunner().invoke(app, [*command, "--help"])
        text = " ".join(done.output.split())  # as wrapped for any width
        assert done.exit_code == 0 and "Exit codes" in text, command
        assert "124 --timeout passed first" in text, command
