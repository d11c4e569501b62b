"""Secrets: argon2 for passwords; random bearer tokens stored as SHA-256 digests.

Tokens carry 256 random bits, so a fast digest is safe for them and makes lookup one indexed
equality; passwords are low-entropy and get argon2 (run in a thread: it is deliberately slow).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER = PasswordHasher()

USER_TOKEN_PREFIX = "gsu_"
NODE_TOKEN_PREFIX = "gsn_"
JOIN_TOKEN_PREFIX = "gsj_"


def new_token(prefix: str) -> str:
    """A new secret; the prefix tells people and secret scanners what it is."""
    return prefix + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_password() -> str:
    return secrets.token_urlsafe(18)


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_HASHER.hash, password)


async def verify_password(password_hash: str, password: str) -> bool:
    def verify() -> bool:
        try:
            return _HASHER.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    return await asyncio.to_thread(verify)
