"""A request body (an async stream) read by blocking code in a thread, in bounded memory.

``tarfile`` and boto3 read files; a request body is an async iterator. ``feed_thread`` runs
the blocking reader in a thread on a file object whose reads take the body's pieces from a
queue of a few 1 MiB pieces, which the event loop fills as they arrive: memory stays bounded
whatever the body's size, and the loop never blocks. If the reader stops early (it refused
the data), the rest of the body is not read; if the body ends early, the reader sees the end.
"""

from __future__ import annotations

import asyncio
import io
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO, TypeVar

T = TypeVar("T")
CHUNK = 1024 * 1024
_DEPTH = 8  # pieces between the body and the reading thread
_EOF = b""


class Interrupted(Exception):
    """The body went away while the reader still waited for data."""


async def feed_thread(body: AsyncIterator[bytes], read: Callable[[BinaryIO], T]) -> T:
    """``read(file)`` in a thread, the file holding ``body``; its result (or exception)."""
    chunks: queue.Queue[bytes] = queue.Queue(maxsize=_DEPTH)
    reader = _QueueReader(chunks)
    work = asyncio.create_task(asyncio.to_thread(read, io.BufferedReader(reader, CHUNK)))
    try:
        async for piece in rechunk(body):
            if not await _put(chunks, piece, work):
                break
        else:
            await _put(chunks, _EOF, work)
        return await work
    finally:
        reader.gone.set()  # a reader still waiting gives up (a failure above, or cancellation)
        if not work.done():
            await asyncio.gather(work, return_exceptions=True)


async def rechunk(body: AsyncIterator[bytes], size: int = CHUNK) -> AsyncIterator[bytes]:
    """The body in pieces of ``size`` bytes (the last one shorter)."""
    pending = bytearray()
    async for piece in body:
        pending += piece
        if len(pending) >= size:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


async def _put(chunks: queue.Queue[bytes], piece: bytes, work: asyncio.Task[T]) -> bool:
    """Hand ``piece`` to the reading thread; False once it stopped (done or failed)."""
    while not work.done():
        try:
            await asyncio.to_thread(chunks.put, piece, True, 0.25)
            return True
        except queue.Full:
            continue
    return False


class _QueueReader(io.RawIOBase):
    def __init__(self, chunks: queue.Queue[bytes]) -> None:
        self.chunks = chunks
        self.buffer = b""
        self.ended = False
        self.gone = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self.buffer and not self.ended:
            if self.gone.is_set():
                raise Interrupted("the upload was interrupted")
            try:
                self.buffer = self.chunks.get(timeout=0.25)
            except queue.Empty:
                continue
            self.ended = self.buffer == _EOF
        size = min(len(target), len(self.buffer))
        target[:size] = self.buffer[:size]
        self.buffer = self.buffer[size:]
        return size


async def file_stream(fd: int, start: int = 0, size: int = CHUNK) -> AsyncIterator[bytes]:
    """The open file ``fd`` from byte ``start`` to its end, read in a thread one piece ahead
    of what is being sent (reading and sending overlap); closes ``fd`` when done or dropped."""
    offset = start
    ahead = asyncio.ensure_future(asyncio.to_thread(os.pread, fd, size, offset))
    try:
        while data := await ahead:
            offset += len(data)
            ahead = asyncio.ensure_future(asyncio.to_thread(os.pread, fd, size, offset))
            yield data
    finally:
        if not ahead.done():
            await asyncio.gather(ahead, return_exceptions=True)  # never close under a read
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
