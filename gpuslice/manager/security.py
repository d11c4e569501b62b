"""Secrets: argon2 for passwords; random bearer tokens stored as SHA-256 digests.

Tokens carry 256 random bits, so a fast digest is safe for them and makes lookup one indexed
equality; passwords are low-entropy and get argon2 (run in a thread: it is deliberately slow).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

T = TypeVar("T")

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


class PasswordChecks:
    """Password verifications on threads of their own (``workers`` at once) at CPU niceness
    ``nice`` (19: the lowest priority): argon2 spreads over several cores by design, and a
    flood of logins must leave every other request the CPU first (its lanes' threads inherit
    the priority)."""

    def __init__(self, workers: int, nice: int = 19) -> None:
        self._pool = ThreadPoolExecutor(
            workers, thread_name_prefix="gpuslice-password", initializer=_niceness,
            initargs=(nice,),
        )

    async def verify(self, password_hash: str, password: str) -> bool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _verify, password_hash, password)

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on these threads: a directory's bind, which is a password check
        too (it blocks, and a flood of them must wait its turn like hashes)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, call, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _niceness(nice: int) -> None:
    try:  # Linux: a thread's own nice value (other systems: left as it is)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):
        pass


def _verify(password_hash: str, password: str) -> bool:
    try:
        return _HASHER.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_HASHER.hash, password)

