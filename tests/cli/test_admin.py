"""`gpuslice admin backup / restore / config` against a running manager, as admins run them."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

from gpuslice.manager.settings import load_settings
from tests.waits import scaled

from .conftest import GPUSLICE, Manager


def _run(manager: Manager, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the manager's own settings (the backup records those it is given)
    env = manager.env | {"GPUSLICE_DATA_DIR": str(tmp_path / "data"),
                         "GPUSLICE_SESSIONS__ALLOWED_IMAGES": '["tests/idle:1"]'}
    return subprocess.run([GPUSLICE, "admin", *args], env=env, capture_output=True, text=True,
                          timeout=scaled(120), check=False)


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
                "--database-only", "--settings-to", str(toml))
    assert done.returncode == 0, done.stderr
    assert "now at head" in done.stdout
    restored = load_settings(toml)  # a file `manager serve --config` takes as it is
    assert restored.data_dir == tmp_path / "data"
    assert restored.sessions.allowed_images == ["tests/idle:1"]

    again = _run(manager, tmp_path, "restore", str(file), "--database-url", target,
                 "--database-only")
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "is not empty" in again.stderr
    assert "--force" in again.stderr and "Traceback" not in again.stderr
    forced = _run(manager, tmp_path, "restore", str(file), "--database-url", target,
                  "--database-only", "--force")
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


def test_config_export_then_import(manager: Manager, tmp_path: Path) -> None:
    file = tmp_path / "config.json"
    done = manager.cli("admin", "config", "export", str(file))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    document = json.loads(file.read_text())
    assert [u["username"] for u in document["users"]] == ["admin"]
    document["users"].append({"username": "newcomer"})
    file.write_text(json.dumps(document))
    dry = manager.cli("admin", "config", "import", str(file), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would import" in dry.stdout and "users: 1 new, 0 changed, 1 unchanged" in dry.stdout
    assert "note: 1 new user(s) have no password yet" in dry.stdout
    done = manager.cli("admin", "config", "import", str(file))
    assert done.returncode == 0 and "users: 1 new" in done.stdout
    again = manager.cli("admin", "config", "import", str(file), "--json")
    assert json.loads(again.stdout)["sections"]["users"] == {
        "created": 0, "updated": 0, "unchanged": 2}
    document["users"].append({"username": "x", "policy": "missing"})
    file.write_text(json.dumps(document))
    bad = manager.cli("admin", "config", "import", str(file))
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("error: users.2.policy: no policy named 'missing' (neither "
                                  "in the document's policies nor on this manager)")
