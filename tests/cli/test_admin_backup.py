"""`gpuslice admin backup / restore` against a running manager's database, as admins run them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuslice.manager.settings import load_settings

from .conftest import GPUSLICE, Manager


def _run(manager: Manager, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the manager's own settings (the backup records those it is given)
    env = manager.env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                         "GPUSLICE_SESSIONS__ALLOWED_IMAGES": '["tests/idle:1"]'}
    return subprocess.run([GPUSLICE, "admin", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_backup_while_running_then_restore_elsewhere(manager: Manager, tmp_path: Path) -> None:
    file = tmp_path / "platform.gsbackup"
    done = _run(manager, tmp_path, "backup", str(file))
    assert done.returncode == 0, done.stderr
    assert "backed up sqlite+aiosqlite:///" in done.stdout and "3 sessions" in done.stdout

    checked = _run(manager, tmp_path, "restore", str(file), "--check")
    assert checked.returncode == 0, checked.stderr
    assert "a complete backup of revision" in checked.stdout

    target = f"sqlite+aiosqlite:///{tmp_path / 'copy.db'}"
    toml = tmp_path / "restored.toml"
    done = _run(manager, tmp_path, "restore", str(file), "--database-url", target,
                "--settings-to", str(toml))
    assert done.returncode == 0, done.stderr
    assert "now at head" in done.stdout
    restored = load_settings(toml)  # a file `manager serve --config` takes as it is
    assert restored.data_dir == tmp_path / "data"
    assert restored.sessions.allowed_images == ["tests/idle:1"]

    again = _run(manager, tmp_path, "restore", str(file), "--database-url", target)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "is not empty" in again.stderr
    assert "--force" in again.stderr and "Traceback" not in again.stderr
    forced = _run(manager, tmp_path, "restore", str(file), "--database-url", target, "--force")
    assert forced.returncode == 0, forced.stderr


def test_bad_files_are_one_line_each(manager: Manager, tmp_path: Path) -> None:
    missing = _run(manager, tmp_path, "restore", str(tmp_path / "nope"))
    assert (missing.returncode, missing.stderr.strip()) == (
        2, f"error: {tmp_path / 'nope'}: no such backup file")
    junk = tmp_path / "junk"
    junk.write_text("hello\n")
    bad = _run(manager, tmp_path, "restore", str(junk), "--check")
    assert (bad.returncode, bad.stderr.strip()) == (
        1, f"error: {junk} is not a gpuslice backup (not gzip)")
    directory = _run(manager, tmp_path, "backup", str(tmp_path))
    assert directory.returncode == 2 and "is a directory" in directory.stderr
