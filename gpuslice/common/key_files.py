"""Files that hold a 32-byte secret key as 64 hexadecimal digits (mode 0600): the backup key
and the audit chain's key. Each caller says in its own words what a missing or bad file means;
here is only how such a file is made and read (never through a symbolic link)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_FLAGS_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create(path: Path, secret: bytes | None = None) -> bool:
    """Write ``secret`` (a new random key when None) to ``path``, mode 0600, synced, unless a
    file is there already; whether it was written."""
    try:
        fd = os.open(path, _FLAGS_NEW, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write((secret if secret is not None else secrets.token_bytes(32)).hex() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return True


def read(path: Path) -> bytes | None:
    """The key in ``path``; None when the file does not hold 64 hexadecimal digits. Raises the
    ``OSError`` of opening it: ``FileNotFoundError``, or ``errno.ELOOP`` for a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as src:
        text = src.read(200).strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return secret if len(secret) == 32 else None
