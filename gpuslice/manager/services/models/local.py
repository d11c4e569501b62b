"""The local model store: files under a directory of the manager (``gpuslice up``'s default).

Objects are files at ``<dir>/<key>`` (directories 0700, files 0600: user data, private to the
manager), written to a temporary name and renamed, so a reader never sees half an object.
Its presigned URLs point at the manager's ``/api/v1/model-store/<key>`` and carry an expiry
and an HMAC-SHA256 over (method, key, expiry) made with a key kept in ``<dir>/.signing-key``
(0600): holding the URL is the whole credential, for that key and method, until it expires.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote, urlencode

from gpuslice.manager.services.models.store import (
    Chunks,
    ModelStore,
    SizeMismatch,
    Stored,
    StoreError,
)
from gpuslice.manager.threads import file_stream, rechunk, write_all

SIGNING_KEY = ".signing-key"
URL_PATH = "/api/v1/model-store/"


class LocalStore(ModelStore):
    direct_uploads = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._key = b""

    async def start(self) -> None:
        self._key = await asyncio.to_thread(self._prepare)

    async def close(self) -> None:
        pass  # nothing held open

    async def put(self, key: str, body: AsyncIterator[bytes], size: int) -> None:
        target = self._path(key)
        await asyncio.to_thread(target.parent.mkdir, mode=0o700, parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        fd = await asyncio.to_thread(os.open, partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                     0o600)
        written = 0
        try:
            try:
                async for piece in rechunk(body):
                    written += len(piece)
                    if written > size:
                        raise SizeMismatch(size, None)
                    await asyncio.to_thread(write_all, fd, piece)
            finally:
                os.close(fd)
            if written != size:
                raise SizeMismatch(size, written)
            await asyncio.to_thread(os.replace, partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    async def open(self, key: str) -> tuple[Chunks, int]:
        try:
            fd = await asyncio.to_thread(os.open, self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise KeyError(key) from None
        return file_stream(fd), os.fstat(fd).st_size

    async def size(self, key: str) -> int | None:
        try:
            return (await asyncio.to_thread(self._path(key).stat)).st_size
        except FileNotFoundError:
            return None

    async def listing(self, prefix: str) -> list[Stored]:
        return await asyncio.to_thread(self._list, prefix)

    async def free_space(self) -> int | None:
        try:
            return (await asyncio.to_thread(shutil.disk_usage, self.directory)).free
        except OSError:  # not made yet, or unreadable: the write itself will say
            return None

    async def delete_prefix(self, prefix: str) -> int:
        found = await self.listing(prefix)
        await asyncio.to_thread(shutil.rmtree, self._path(prefix.rstrip("/")), True)
        return len(found)

    async def delete_keys(self, keys: list[str]) -> None:
        def delete() -> None:
            for key in keys:
                self._path(key).unlink(missing_ok=True)

        await asyncio.to_thread(delete)

    def presign(self, method: str, key: str, ttl: int, base_url: str) -> str:
        # Rounded up: good for at least ``ttl`` seconds (truncated, one signed late in a
        # second lost most of its first second, and a 1-second URL could be dead at once).
        expires = math.ceil(time.time() + ttl)
        query = urlencode({"method": method, "expires": expires,
                           "signature": self.signature(method, key, expires)})
        return f"{base_url.rstrip('/')}{URL_PATH}{quote(key)}?{query}"

    def signature(self, method: str, key: str, expires: int) -> str:
        message = f"{method.upper()}\n{key}\n{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def check(self, method: str, key: str, expires: int, signature: str) -> str | None:
        """Why a presigned URL is refused (None: it is good)."""
        if not hmac.compare_digest(self.signature(method, key, expires), signature):
            return "the URL's signature does not match (changed, or for another method)"
        if expires < time.time():
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
            return f"the URL expired at {when}"
        return None

    # ------------------------------------------------------------ helpers

    def _prepare(self) -> bytes:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        path = self.directory / SIGNING_KEY
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_bytes()
        key = secrets.token_bytes(32)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or key.startswith(SIGNING_KEY):
            raise StoreError(f"not a store key: {key!r}")
        return self.directory.joinpath(*parts)

    def _list(self, prefix: str) -> list[Stored]:
        top = self._path(prefix.rstrip("/"))
        if not top.is_dir():
            return []
        found = []
        for path in top.rglob("*"):
            if path.is_file() and not path.name.endswith(".partial"):
                key = path.relative_to(self.directory).as_posix()
                found.append(Stored(key, path.stat().st_size))
        return sorted(found, key=lambda s: s.key)
