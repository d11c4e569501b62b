"""SSH public keys: what a user registers so that their sessions' SSH servers let them in."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

MAX_KEY_TEXT = 16384  # an RSA-16384 public key is ~2.8 KB; a whole authorized_keys line more


class SshKeyCreate(BaseModel):
    """An OpenSSH public key, as in ``~/.ssh/id_ed25519.pub``."""

    key: str = Field(max_length=MAX_KEY_TEXT,
                     description="`<type> <base64> [comment]`, e.g. the content of "
                                 "~/.ssh/id_ed25519.pub.")
    name: str | None = Field(default=None, min_length=1, max_length=64,
                             pattern=r"^[^\x00-\x1f\x7f]+$",
                             description="A name to tell it by (default: the key's comment).")


class SshKeyPublic(BaseModel):
    id: str
    name: str
    type: str = Field(description="e.g. `ssh-ed25519`.")
    fingerprint: str = Field(description="`SHA256:…`, as `ssh-keygen -l` shows it.")
    created_at: datetime
