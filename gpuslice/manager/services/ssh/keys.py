"""Users' SSH public keys: validated, stored per user, listed, removed, and handed (the session
owner's) to the agent for each SSH connection.

A key is checked as ``sshd`` would load it: one line ``<type> <base64> [comment]`` of a type
OpenSSH accepts, whose base64 names the same type and (for the plain types) parses as that
kind of key (``cryptography``); RSA keys under 2048 bits are refused, as OpenSSH refuses them.
A private key given by mistake is refused without being stored or echoed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.ssh import SshKeyCreate, SshKeyPublic
from gpuslice.manager.db.models import SshKeyRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound

MAX_KEYS = 64  # per user: more is a mistake (and a long authorized_keys for every connection)
MIN_RSA_BITS = 2048
#: OpenSSH's public key types; the security-key ones (``sk-``) are parsed by OpenSSH only.
PLAIN_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
               "ecdsa-sha2-nistp521")
SK_TYPES = ("sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
_ALLOWED = ", ".join(PLAIN_TYPES + SK_TYPES)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ParsedKey:
    type: str
    blob: bytes
    comment: str

    @property
    def line(self) -> str:
        """The key as an authorized_keys line (no comment, no options)."""
        return f"{self.type} {base64.b64encode(self.blob).decode()}"

    @property
    def fingerprint(self) -> str:
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode()
        return "SHA256:" + digest.rstrip("=")


def parse(text: str) -> ParsedKey:
    """``text`` as an OpenSSH public key; ``InvalidRequest`` saying what is wrong."""
    if "PRIVATE KEY" in text:
        raise InvalidRequest(
            "this is a private key: give its public half, the .pub file (e.g. "
            "~/.ssh/id_ed25519.pub); the private key never leaves your machine",
            field="key", code="private_key")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        raise InvalidRequest(f"one public key per call, on one line; got {len(lines)} lines",
                             field="key", code="invalid_ssh_key")
    parts = lines[0].split(None, 2)
    if parts[0] not in PLAIN_TYPES + SK_TYPES:
        raise InvalidRequest(f"not an OpenSSH public key: it starts with {parts[0][:40]!r}, "
                             f"not a key type ({_ALLOWED})", field="key", code="invalid_ssh_key")
    if len(parts) < 2:
        raise InvalidRequest(f"a {parts[0]} key without its base64 part", field="key",
                             code="invalid_ssh_key")
    key = ParsedKey(parts[0], _blob(parts[0], parts[1]), parts[2] if len(parts) > 2 else "")
    if key.type in PLAIN_TYPES:
        _check_key(key)
    return key


async def add_key(db: AsyncSession, user: UserRow, body: SshKeyCreate) -> SshKeyPublic:
    """Register ``body.key`` for ``user``; ``Conflict`` ``ssh_key_exists`` for one they have."""
    key = parse(body.key)
    count = len((await db.scalars(select(SshKeyRow.id).where(
        SshKeyRow.user_id == user.id))).all())
    if count >= MAX_KEYS:
        raise Conflict(f"you have {count} SSH keys, the most allowed; remove one first",
                       code="too_many_ssh_keys")
    # A comment is free text: kept as a name without its control characters (NUL among them,
    # which PostgreSQL refuses in text).
    name = (body.name or _CONTROL.sub("", key.comment).strip() or key.type)[:64]
    row = SshKeyRow(user_id=user.id, name=name, key_type=key.type, public_key=key.line,
                    fingerprint=key.fingerprint)
    db.add(row)
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"you have this key already ({key.fingerprint})", field="key",
                       code="ssh_key_exists") from None
    return public(row)


async def list_keys(db: AsyncSession, user: UserRow) -> list[SshKeyPublic]:
    """The caller's own keys, oldest first (admins too see only their own)."""
    rows = await db.scalars(select(SshKeyRow).where(SshKeyRow.user_id == user.id)
                            .order_by(SshKeyRow.created_at, SshKeyRow.id))
    return [public(row) for row in rows]


async def remove_key(db: AsyncSession, user: UserRow, ref: str) -> None:
    """Remove one of the caller's keys, by id, fingerprint or name (a name two keys share is
    ambiguous); anyone else's is a 404, as a key that does not exist."""
    rows = (await db.scalars(select(SshKeyRow).where(SshKeyRow.user_id == user.id))).all()
    found = [r for r in rows if ref == r.id or ref == r.fingerprint] or \
        [r for r in rows if ref == r.name]
    if not found:
        raise NotFound(f"no SSH key {ref} (see `gpuslice ssh-key list`)", field="key_id")
    if len(found) > 1:
        raise Conflict(f"{len(found)} of your keys are named {ref}: remove one by its "
                       "fingerprint", code="ambiguous_ssh_key")
    await db.delete(found[0])
    await db.commit()


async def authorized_keys(db: AsyncSession, user_id: str) -> list[str]:
    """The lines of ``user_id``'s keys, for a session's SSH server."""
    return list(await db.scalars(select(SshKeyRow.public_key).where(
        SshKeyRow.user_id == user_id).order_by(SshKeyRow.created_at)))


def public(row: SshKeyRow) -> SshKeyPublic:
    return SshKeyPublic(id=row.id, name=row.name, type=row.key_type,
                        fingerprint=row.fingerprint, created_at=row.created_at)


def _blob(key_type: str, text: str) -> bytes:
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"the {key_type} key's base64 part is damaged (copy the whole "
                             "line of the .pub file)", field="key",
                             code="invalid_ssh_key") from None
    try:
        (length,) = struct.unpack(">I", blob[:4])
        named = blob[4:4 + length].decode("ascii")
    except (struct.error, UnicodeDecodeError):
        named = ""
    if named != key_type:
        raise InvalidRequest(f"the key says it is {key_type} but its data is not (copy the "
                             "whole line of the .pub file)", field="key", code="invalid_ssh_key")
    return blob


def _check_key(key: ParsedKey) -> None:
    try:
        loaded = load_ssh_public_key(key.line.encode())
    except (ValueError, TypeError) as exc:  # cryptography: malformed or unsupported
        raise InvalidRequest(f"the {key.type} key is damaged: {exc}", field="key",
                             code="invalid_ssh_key") from None
    if isinstance(loaded, rsa.RSAPublicKey) and loaded.key_size < MIN_RSA_BITS:
        raise InvalidRequest(f"an RSA key of {loaded.key_size} bits; OpenSSH refuses RSA keys "
                             f"under {MIN_RSA_BITS} bits: make an ed25519 one (ssh-keygen -t "
                             "ed25519)", field="key", code="weak_ssh_key")
