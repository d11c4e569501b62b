"""`--gpu-mem` counts MiB when it is a bare number, in every command that takes it (issue 35,
finding 7: `--gpu-mem 2048` ran on 2048 bytes); units keep working."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuslice.cli.main import app
from gpuslice.common.resources import GiB, MiB

from .conftest import IMAGE, Manager


def test_session_create_reads_a_bare_gpu_mem_as_mib(manager: Manager) -> None:
    # one manager for every spelling: each case is a request, not a platform
    for given, asked in (("2048", 2 * GiB), ("2GiB", 2 * GiB), ("512MiB", 512 * MiB),
                         ("1.5g", GiB + GiB // 2)):
        done = manager.cli("session", "create", "--image", IMAGE, "--cpu", "0.25", "--mem",
                           "64m", "--gpu-mem", given, "--json")
        assert done.returncode == 0, (given, done.stderr)
        [session] = json.loads(done.stdout)
        assert session["resources"]["gpu_mem"] == asked, given


def test_the_help_says_mib_and_a_bad_size_names_the_option() -> None:
    for command in (["session", "create"], ["run", "start"]):
        shown = CliRunner().invoke(app, [*command, "--help"]).output
        text = " ".join(shown.replace("\u2502", " ").split())  # as wrapped, out of its box
        assert "in MiB (2048) or with a unit (2GiB, 512MiB)" in text, command
    done = CliRunner().invoke(app, ["session", "create", "--gpu-mem", "lots"],
                              env={"GPUSLICE_URL": "http://127.0.0.1:9"})
    assert (done.exit_code, done.stderr) == (2, (
        "error: --gpu-mem: 'lots' is not a size; write e.g. 512m, 2g or 1.5g "
        "(a plain number counts MiB)\n"))
