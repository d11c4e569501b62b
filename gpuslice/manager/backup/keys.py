"""The backup key: what makes a backup's authenticity checkable.

A backup's lines are covered by an HMAC-SHA256 under a 32-byte key kept outside every backup:
by default ``backup-key`` in the data directory (mode 0600, made by the first backup, left out
of the data area), beside the other secrets. A restore or a ``restore --check`` refuses a
backup whose MAC does not match before it writes anything, so whoever can write where backups
are kept (a NAS, a bucket) cannot choose what a restore does. The file holds the key as 64
hexadecimal digits: an admin keeps a copy away from the machine (a password manager) and gives
it to a restore elsewhere with ``--key``.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

from gpuslice.common import key_files
from gpuslice.manager.backup.errors import BackupError, KeyUnavailable

KEY_FILE = "backup-key"
_ID_LABEL = b"gpuslice backup key id"


@dataclass(frozen=True, slots=True)
class BackupKey:
    secret: bytes
    source: Path

    @property
    def id(self) -> str:
        """A short name for the key, written in each backup's header: not the key, and not
        enough to forge with."""
        return hmac.new(self.secret, _ID_LABEL, hashlib.sha256).hexdigest()[:16]

    def mac(self) -> hmac.HMAC:
        return hmac.new(self.secret, digestmod=hashlib.sha256)


def default_key_file(data_dir: Path) -> Path:
    return data_dir / KEY_FILE


def load(path: Path) -> BackupKey:
    """The key in ``path``, or a `BackupError` that says what to do."""
    try:
        secret = key_files.read(path)
    except FileNotFoundError:
        raise KeyUnavailable(
            f"there is no backup key at {path}: give the key of the platform that made the "
            "backup with --key FILE (the file backup-key in its data directory), or copy that "
            f"file to {path}; if that key is lost, --trust-unsigned restores without checking "
            "the backup's MAC (only for a backup kept where no one else could write)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BackupError(f"{path} is a symbolic link: give the key file itself") from None
        raise BackupError(f"cannot read the backup key {path}: {exc.strerror or exc}") from None
    if secret is None:
        raise BackupError(f"{path} is not a backup key (it holds 64 hexadecimal digits)")
    return BackupKey(secret, path)


def load_or_create(path: Path) -> tuple[BackupKey, bool]:
    """The key in ``path``, made (mode 0600) when there is none; and whether it was made (by
    this call, not an earlier backup or one running beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    made = key_files.create(path)
    return load(path), made


def keep(key: BackupKey, path: Path) -> bool:
    """Write ``key`` to ``path`` unless a file is there (a restored platform goes on with the
    key its backups were made with); whether it was written."""
    return key_files.create(path, key.secret)
