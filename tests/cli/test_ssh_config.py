"""`gpuslice ssh-config`'s block (F13 of the 2026-12 security review): OpenSSH before 9.6 pastes
the host name as typed into the ProxyCommand's shell, so `%h` there is quoted, and `ssh-proxy`
takes session host names only; each session's host key is pinned in a file of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import GPUSLICE


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")} | {
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def _block(tmp_path: Path) -> str:
    done = subprocess.run([GPUSLICE, "ssh-config"], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_host_name_never_reaches_the_proxy_commands_shell(tmp_path: Path) -> None:
    [line] = [x.strip() for x in _block(tmp_path).splitlines()
              if x.strip().startswith("ProxyCommand ")]
    command = line.removeprefix("ProxyCommand ")
    for host in ("$(touch pwn).gpuslice", "`touch pwn`.gpuslice", "a;touch pwn;.gpuslice"):
        # what OpenSSH before 9.6 runs: /bin/sh -c with %h replaced by the name as given
        shell = command.replace("%h", host).replace("%%", "%")
        done = subprocess.run(["/bin/sh", "-c", shell], cwd=tmp_path, env=_env(tmp_path),
                              capture_output=True, text=True, timeout=60, check=False)
        assert not (tmp_path / "pwn").exists(), f"{host!r} ran in the shell: {shell}"
        assert done.returncode == 2, done.stderr
        assert f"error: {host!r} is not a session's host name" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_the_block_pins_host_keys_per_session_in_the_clis_own_folder(tmp_path: Path) -> None:
    block = _block(tmp_path)
    known = tmp_path / "home" / ".config" / "gpuslice" / "known_hosts"
    assert f"--known-hosts {known} '%h'" in block
    assert f"UserKnownHostsFile {known}/%h" in block
    assert "StrictHostKeyChecking accept-new" in block and "UpdateHostKeys no" in block
    assert "StrictHostKeyChecking no" not in block and "/dev/null" not in block
    checked = subprocess.run(["ssh", "-G", "-F", "/dev/stdin", "dev.gpuslice"], input=block,
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stderr  # OpenSSH reads it without a complaint
    assert f"userknownhostsfile {known}/dev.gpuslice" in checked.stdout
