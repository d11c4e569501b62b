"""`gpuslice folder` with a file name a session wrote that is not UTF-8 (issue 35, finding 10):
`ls` shows it in a form the shell gives back, and `download` / `rm` take it as bytes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.waits import scaled

from .conftest import GPUSLICE, Manager

BAD = b"bad\xffname"  # what `printf x > "$(printf 'bad\377name')"` leaves in a session


def _cli(manager: Manager, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([GPUSLICE, *args], env=manager.env, capture_output=True,
                          timeout=scaled(60), check=False)


def test_a_name_that_is_not_utf8_is_listed_downloaded_and_deleted(
    manager: Manager, tmp_path: Path
) -> None:
    done = _cli(manager, "folder", "create", "data")
    assert done.returncode == 0, done.stderr
    with manager.client() as client:
        folder = client.find_folder("data")
    on_disk = tmp_path / "data" / "storage" / "users" / str(folder.owner_id) / folder.id
    with open(os.fsencode(on_disk) + b"/" + BAD, "wb") as out:
        out.write(b"session bytes")

    listed = _cli(manager, "folder", "ls", "data")
    assert listed.returncode == 0, listed.stderr
    assert b"$'bad\\xffname'" in listed.stdout

    target = tmp_path / "got"
    got = _cli(manager, "folder", "download", "data", BAD, "--to", str(target))
    assert got.returncode == 0, got.stderr
    assert target.read_bytes() == b"session bytes"
    assert "data:bad\ufffdname" in got.stdout.decode()

    gone = _cli(manager, "folder", "rm", "data", BAD, "--yes")
    assert gone.returncode == 0, gone.stderr
    assert not os.path.exists(os.fsencode(on_disk) + b"/" + BAD)
    assert b"bad" not in _cli(manager, "folder", "ls", "data").stdout
