"""Encryption of what single sign-on must keep but never store as it is: the provider's
refresh and ID tokens, a sign-in's nonce and PKCE verifier. Fernet (AES-128-CBC + HMAC) with a
key in ``<data_dir>/auth-secrets.key`` (64 hex digits, mode 0600, made at the first start,
beside the manager's other keys; backups copy it)."""

from __future__ import annotations

import base64
import errno
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from gpuslice.common import key_files

KEY_FILE = "auth-secrets.key"


class VaultError(Exception):
    """The key cannot be read (the message says what to do)."""


class Vault:
    def __init__(self, secret: bytes) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(secret))

    def seal(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def open(self, sealed: str) -> str | None:
        """The text sealed, None when it was sealed with another key or changed."""
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode()
        except (InvalidToken, ValueError):
            return None


def load(data_dir: Path) -> Vault:
    """The vault of ``<data_dir>/auth-secrets.key``, made when missing."""
    path = data_dir / KEY_FILE
    key_files.create(path)
    try:
        secret = key_files.read(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise VaultError(f"{path} is a symbolic link: put the key file itself there"
                             ) from None
        raise VaultError(f"cannot read the sign-in secrets key {path}: {exc.strerror}"
                         ) from None
    if secret is None:
        raise VaultError(f"{path} is not a key (it holds 64 hexadecimal digits): restore it "
                         "from a backup, or remove it (signed-in SSO users then sign in again)")
    return Vault(secret)
