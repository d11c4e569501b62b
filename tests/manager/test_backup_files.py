"""Backups of the file areas against what users and whoever holds the backup disk can do
(security review 2026-12, F1 and F2): a directory swapped for a link while the backup reads
it, links already there, a crafted backup whose entries lead out of the staging directory,
and a backup changed on its disk."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from gpuslice.manager.backup import BackupError, backup, restore, verify
from gpuslice.manager.backup.keys import BackupKey, load_or_create
from gpuslice.manager.backup.members import Area
from tests.manager.backup_helpers import signed

SECRET = b"password: S3cret!\n"
FOLDER = Path("users/alice/F")


@pytest.fixture
def key(tmp_path: Path) -> BackupKey:
    return load_or_create(tmp_path / "keys" / "backup-key")[0]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data directory with the admin's secret, and alice's folder F in its storage with a
    directory ``d`` holding a big file first and placeholders named like host files."""
    data = tmp_path / "data"
    d = data / "storage" / FOLDER / "d"
    d.mkdir(parents=True)
    (data / "admin-credentials").write_bytes(SECRET)
    (d / "0big").write_bytes(os.urandom(2 * 1024**2))
    (d / "admin-credentials").write_text("placeholder\n")
    return data


def _areas(data: Path) -> list[Area]:
    return [Area("data", data, frozenset({data / "storage"})),
            Area("storage", data / "storage")]


def _regular_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.is_symlink()}


async def test_a_directory_swapped_for_a_link_while_its_files_are_read_brings_no_host_file(
    migrated_database_url: str, tmp_path: Path, data: Path, key: BackupKey
) -> None:
    d = data / "storage" / FOLDER / "d"

    def swap_when_the_sentinel_is_read(path: str, done: int, total: int) -> None:
        # what a session does on the sentinel's IN_OPEN: d becomes a link to the data directory
        if path.endswith("F/d/0big") and not d.is_symlink():
            d.rename(d.with_name("d.old"))
            d.symlink_to("../../../..")

    file = tmp_path / "b.gsbackup"
    await backup(migrated_database_url, file, key, areas=_areas(data),
                 file_progress=swap_when_the_sentinel_is_read)
    assert d.is_symlink()  # the swap happened while the backup ran
    restored = tmp_path / "restored"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                  targets={"storage": restored})
    files = _regular_files(restored)
    assert not [name for name, content in files.items() if SECRET in content]
    # what the directory held when the backup opened it, read through that descriptor
    assert files[str(FOLDER / "d" / "admin-credentials")] == b"placeholder\n"


async def test_links_already_there_are_kept_as_links_never_followed(
    migrated_database_url: str, tmp_path: Path, data: Path, key: BackupKey
) -> None:
    folder = data / "storage" / FOLDER
    (folder / "creds").symlink_to("../../../../admin-credentials")
    (folder / "up").symlink_to("../../../..")
    (folder / "etc").symlink_to("/etc")
    file = tmp_path / "b.gsbackup"
    taken = await backup(migrated_database_url, file, key, areas=_areas(data))
    assert taken.gone == 0
    restored = tmp_path / "restored"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                  targets={"storage": restored})
    again = restored / FOLDER
    assert {name: os.readlink(again / name) for name in ("creds", "up", "etc")} == {
        "creds": "../../../../admin-credentials", "up": "../../../..", "etc": "/etc"}
    assert not [n for n, content in _regular_files(restored).items() if SECRET in content]
    assert sorted(p.name for p in again.iterdir()) == ["creds", "d", "etc", "up"]


async def test_a_directory_swapped_before_it_is_read_restores_as_the_check_said(
    migrated_database_url: str, tmp_path: Path, data: Path, key: BackupKey
) -> None:
    """The variant: ``d`` becomes a link to a directory holding the planned names before the
    backup reaches it. The backup must hold the link and nothing under it, so that what
    ``restore --check`` passes restores, and nothing is written where the link points."""
    d = data / "storage" / FOLDER / "d"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0big").write_text("not alice's\n")
    (elsewhere / "admin-credentials").write_text("not alice's either\n")

    def swap_before_the_storage_is_read(path: str, done: int, total: int) -> None:
        if path.startswith("data/") and not d.is_symlink():
            d.rename(d.with_name("d.old"))
            d.symlink_to(elsewhere)

    file = tmp_path / "b.gsbackup"
    taken = await backup(migrated_database_url, file, key, areas=_areas(data),
                         file_progress=swap_before_the_storage_is_read)
    assert taken.gone == 2  # the two files planned under d
    verify(file, key)
    restored = tmp_path / "restored"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                  targets={"storage": restored})
    assert os.readlink(restored / FOLDER / "d") == str(elsewhere)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["0big", "admin-credentials"]
    assert (elsewhere / "0big").read_text() == "not alice's\n"


@pytest.mark.parametrize("under", [
    {"kind": "file", "path": "z/pwned", "mode": 0o4755},
    {"kind": "dir", "path": "z/sub", "mode": 0o777},
], ids=["a file under the link", "a directory under the link"])
async def test_a_crafted_backup_writes_nothing_outside_its_staging(
    migrated_database_url: str, tmp_path: Path, key: BackupKey, under: dict[str, object]
) -> None:
    """F2: ``link z → outside`` then an entry under ``z``, signed with the right key (the MAC
    is not what stops it): refused, by the check as by the restore, nothing written outside."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    lines = await _one_file_backup(migrated_database_url, tmp_path, key)
    crafted = [
        {"area": "storage", "kind": "link", "path": "z", "target": str(outside)},
        {"area": "storage", **under},
    ]
    content = b"* * * * * root id > /tmp/pwned\n"
    extra = [json.dumps(e) + "\n" for e in crafted]
    if under["kind"] == "file":
        extra += [json.dumps(base64.b64encode(content).decode()) + "\n",
                  json.dumps({"size": len(content),
                              "sha256": hashlib.sha256(content).hexdigest()}) + "\n"]
    file = tmp_path / "crafted.gsbackup"
    file.write_bytes(signed(_with_entries(lines, extra, len(crafted)), key))

    with pytest.raises(BackupError, match=r"entry storage/z/\w+ is not under a directory the "
                                          r"backup holds before it"):
        verify(file, key)
    restored = tmp_path / "restored"
    with pytest.raises(BackupError, match="made or changed by hand"):
        await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                      targets={"storage": restored})
    assert list(outside.iterdir()) == [] and oct(outside.stat().st_mode & 0o7777) == "0o700"
    assert not restored.exists() and not (tmp_path / "r.db").exists()
    assert [p.name for p in tmp_path.iterdir() if "restoring" in p.name] == []


async def test_a_backup_changed_on_its_disk_is_refused_before_anything_is_written(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    lines = await _one_file_backup(migrated_database_url, tmp_path, key)
    at = next(i for i, line in enumerate(lines) if '"path":"x"' in line) + 1
    changed = b"not what was backed up\n"
    lines[at] = json.dumps(base64.b64encode(changed).decode()) + "\n"
    lines[at + 1] = json.dumps({"size": len(changed),  # its SHA-256 made to match: only
                                "sha256": hashlib.sha256(changed).hexdigest()}) + "\n"  # the MAC
    file = tmp_path / "changed.gsbackup"
    file.write_bytes(gzip.compress("".join(lines).encode()))
    target, restored = tmp_path / "r.db", tmp_path / "restored"
    refused = "has been changed since it was written .* nothing was written; restore another"
    with pytest.raises(BackupError, match=refused):
        verify(file, key)
    with pytest.raises(BackupError, match=refused):
        await _restore(file, target, key, restored)
    assert not target.exists() and not restored.exists()
    assert [p.name for p in tmp_path.iterdir() if "restoring" in p.name] == []

    other = load_or_create(tmp_path / "other" / "backup-key")[0]
    original = tmp_path / "b.gsbackup"
    with pytest.raises(BackupError, match=rf"signed with another backup key \(id {key.id}\) "
                                          rf"than {other.source} .*--key FILE"):
        verify(original, other)
    with pytest.raises(BackupError, match=r"no backup key at .*nowhere.*--key FILE"):
        verify(original, tmp_path / "nowhere" / "backup-key")


async def test_a_backup_whose_key_is_lost_restores_on_the_admins_word_a_changed_one_never(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    """The machine, and its data directory's backup-key with it, are gone and no copy of the
    key was kept: the lab's backup must still come back, on --trust-unsigned. A backup whose
    MAC does not match the key it names is refused even so."""
    lines = await _one_file_backup(migrated_database_url, tmp_path, key)
    original, lost = tmp_path / "b.gsbackup", tmp_path / "gone" / "backup-key"
    with pytest.raises(BackupError, match=r"no backup key at .*if that key is lost, "
                                          r"--trust-unsigned restores without checking"):
        verify(original, lost)
    other = load_or_create(tmp_path / "other" / "backup-key")[0]
    for without in (lost, other):
        assert verify(original, without, trust_unsigned=True).key_id == key.id
    target, restored = tmp_path / "r.db", tmp_path / "restored"
    await restore(original, f"sqlite+aiosqlite:///{target}", lost, trust_unsigned=True,
                  targets={"storage": restored, "data": tmp_path / "data-new"})
    assert (restored / "x").read_text() == "backed up\n"
    assert not (tmp_path / "data-new" / "backup-key").exists()  # no key to keep: the next
    # backup makes one

    at = next(i for i, line in enumerate(lines) if '"path":"x"' in line) + 1
    lines[at] = json.dumps(base64.b64encode(b"changed\n").decode()) + "\n"
    changed = tmp_path / "changed.gsbackup"
    changed.write_bytes(gzip.compress("".join(lines).encode()))
    with pytest.raises(BackupError, match="has been changed since it was written"):
        verify(changed, key, trust_unsigned=True)


async def test_an_admin_checks_a_backup_with_the_key_file_alone(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    """What docs/operations.md tells an admin on another machine: the MAC in the end marker is
    HMAC-SHA256, under the key file's 64 hex digits, of every line before it."""
    lines = await _one_file_backup(migrated_database_url, tmp_path, key)
    secret = bytes.fromhex(key.source.read_text().strip())
    mac = hmac.new(secret, "".join(lines[:-1]).encode(), hashlib.sha256).hexdigest()
    assert json.loads(lines[-1])["mac"] == mac
    assert json.loads(lines[0])["key_id"] == key.id


async def test_a_backup_made_before_backups_were_signed_needs_trust_unsigned(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    lines = await _one_file_backup(migrated_database_url, tmp_path, key)
    header = json.loads(lines[0])
    header.pop("key_id")
    lines[0] = json.dumps(header | {"format_version": 2}) + "\n"
    trailer = json.loads(lines[-1])
    trailer.pop("mac")
    lines[-1] = json.dumps(trailer) + "\n"
    old = tmp_path / "old.gsbackup"
    old.write_bytes(gzip.compress("".join(lines).encode()))
    target, restored = tmp_path / "r.db", tmp_path / "restored"
    refused = "format 2, made before backups were signed: .* restore it with --trust-unsigned"
    with pytest.raises(BackupError, match=refused):
        verify(old, key)
    with pytest.raises(BackupError, match=refused):
        await _restore(old, target, key, restored)
    assert not target.exists() and not restored.exists()
    assert verify(old, key, trust_unsigned=True).key_id is None
    await restore(old, f"sqlite+aiosqlite:///{target}", key, trust_unsigned=True,
                  targets={"storage": restored})
    assert (restored / "x").read_text() == "backed up\n"


async def test_names_that_are_not_utf8_come_back_as_they_were(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    """A session may name a file with any bytes (``printf x > "$(printf 'bad\\377')"``): that
    must not stop every backup."""
    root = tmp_path / "storage"
    odd = os.fsdecode(b"bad\xffname")
    (root / odd).mkdir(parents=True)
    (root / odd / "f").write_text("kept\n")
    (root / "l").symlink_to(odd)
    file = tmp_path / "b.gsbackup"
    await backup(migrated_database_url, file, key, areas=[Area("storage", root)])
    restored = tmp_path / "restored"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                  targets={"storage": restored})
    assert (restored / odd / "f").read_text() == "kept\n"
    assert os.readlink(restored / "l") == odd


# ------------------------------------------------------------ helpers


async def _one_file_backup(url: str, tmp_path: Path, key: BackupKey) -> list[str]:
    """The lines of a real backup of a storage area holding the file ``x``."""
    root = tmp_path / "storage"
    root.mkdir()
    (root / "x").write_text("backed up\n")
    file = tmp_path / "b.gsbackup"
    await backup(url, file, key, areas=[Area("storage", root)])
    return gzip.decompress(file.read_bytes()).decode().splitlines(keepends=True)


def _with_entries(lines: list[str], extra: list[str], count: int) -> list[str]:
    """``lines`` with ``extra`` appended to the storage area (``count`` more entries)."""
    header = json.loads(lines[0])
    header["areas"][0]["entries"] += count
    trailer = json.loads(lines[-1])
    trailer["entries"] += count
    return [json.dumps(header) + "\n", *lines[1:-1], *extra, json.dumps(trailer) + "\n"]


async def _restore(file: Path, target: Path, key: BackupKey, restored: Path) -> None:
    await restore(file, f"sqlite+aiosqlite:///{target}", key, targets={"storage": restored})
