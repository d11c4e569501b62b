"""The model store behind one interface, with two backends (``local``, ``s3``).

Keys are built only by ``catalog.key_of`` from the owner's id, a checked model name, a
version the manager chose and a checked relative path: ``users/<owner id>/<name>/<version>/
<path>``. A backend stores bytes under keys; it knows nothing of users.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

#: An object's bytes for a streamed answer: read in a thread either way.
Chunks = AsyncIterator[bytes] | Iterator[bytes]


class StoreError(Exception):
    """The store refused or could not be reached; the message says which and why."""


class SizeMismatch(StoreError):
    """A body of another length than announced: the sender's mistake, not the store's.
    ``received`` is None when more than ``announced`` came (the rest is not read)."""

    def __init__(self, announced: int, received: int | None) -> None:
        self.announced, self.received = announced, received
        got = f"more than {announced}" if received is None else str(received)
        super().__init__(f"{announced} bytes were announced and {got} came: send exactly "
                         "the bytes announced")


@dataclass(frozen=True, slots=True)
class Stored:
    key: str
    size: int


class ModelStore(abc.ABC):
    """Bytes under keys, streamed in bounded memory both ways."""

    #: Whether sessions send files to the store themselves with presigned URLs (S3), rather
    #: than streaming them through their node's agent (a local store on the manager, which
    #: sessions cannot reach).
    direct_uploads: bool = False
    #: Headers every PUT to a URL of ``presign_put`` must carry (signed into the URL).
    put_headers: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @abc.abstractmethod
    async def start(self) -> None:
        """Get ready (make the directory or the bucket); called once when the manager starts."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; called once when the manager stops."""

    @abc.abstractmethod
    async def put(self, key: str, body: AsyncIterator[bytes], size: int) -> None:
        """Store ``body`` (exactly ``size`` bytes) at ``key``, replacing what was there; a
        body of another length stores nothing and raises ``SizeMismatch``."""

    @abc.abstractmethod
    async def open(self, key: str) -> tuple[Chunks, int]:
        """The bytes at ``key`` as blocking chunks (for a streamed answer) and their size;
        ``KeyError`` when there is nothing."""

    @abc.abstractmethod
    async def size(self, key: str) -> int | None:
        """The size of what is at ``key``; None when there is nothing."""

    @abc.abstractmethod
    async def listing(self, prefix: str) -> list[Stored]:
        """Everything under ``prefix``."""

    @abc.abstractmethod
    async def delete_prefix(self, prefix: str) -> int:
        """Delete everything under ``prefix`` (a model version); how many objects went."""

    @abc.abstractmethod
    async def delete_keys(self, keys: list[str]) -> None:
        """Delete the objects at ``keys`` (exactly those: no prefix matching)."""

    async def free_space(self) -> int | None:
        """Bytes the store can still take; None when it cannot tell (S3 grows as needed)."""
        return None

    @abc.abstractmethod
    def presign(self, method: str, key: str, ttl: int, base_url: str) -> str:
        """A URL that lets its holder ``GET`` or ``PUT`` exactly ``key`` for ``ttl`` seconds,
        with no other credential. ``base_url``: the manager as the caller reaches it (the
        local store's URLs point at the manager)."""

    def presign_put(self, key: str, size: int, ttl: int) -> str:
        """A URL that lets its holder PUT exactly ``size`` bytes at ``key``, once, for ``ttl``
        seconds (the store itself refuses another length, and a PUT where an object already
        is). Only stores with ``direct_uploads`` give them."""
        raise StoreError("this model store takes no direct uploads")
