"""Files in folders through the API: listing, streamed upload (resumable) and download (with
``Range``), directories as tar streams, removal. Blocking file work runs in threads; bodies
are streamed in 1 MiB pieces, never read whole.

An upload goes to a partial file beside the folders (``<root>/.uploads``), keyed by folder,
uploader and path; only a complete one (``size`` bytes) is moved into the folder, atomically,
so a broken upload never leaves half a file where readers look, and the next attempt resumes
from the bytes the manager holds (``GET …/uploads``) or starts again (``offset=0``). Each
upload reserves its bytes of the quota first (``reservations.py``): an unfinished one holds
its whole size, and uploads at once cannot pass one check together.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import ClientDisconnect

from gpuslice.common.schemas.storage import (
    ArchiveUploaded,
    FileEntry,
    FolderListing,
    UploadState,
)
from gpuslice.common.storage_paths import from_raw, raw_form, shown
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.services.storage import archive
from gpuslice.manager.services.storage.access import Access
from gpuslice.manager.services.storage.fs import FILE_MODE, Entry, StorageFS, rule
from gpuslice.manager.services.storage.fs import rule_or_root as rule_dir
from gpuslice.manager.services.storage.reservations import finish, release, reserve
from gpuslice.manager.threads import file_stream, write_all

CHUNK = 1024 * 1024
# An archive reserves this much beyond the file it unpacks, where the quota leaves it: one
# reservation per many small files, not one each.
ARCHIVE_SPARE = 64 * 1024 * 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Download:
    """An open file to stream: ``size`` bytes in all, sent from ``start``."""

    chunks: AsyncIterator[bytes]
    size: int
    start: int


def given_path(path: str | None, raw_path: str | None, *, default: str | None) -> str:
    """The path a request names: ``path`` (text), or ``raw_path`` (its bytes percent-encoded,
    for names that are not UTF-8); ``default`` when neither is given (``None``: one must be).
    The path rules apply afterwards, to the bytes, whichever form named it."""
    if path is not None and raw_path is not None:
        raise InvalidRequest("give the path as path or as raw_path, not both", field="path",
                             code="path_not_allowed")
    if raw_path is not None:
        return from_raw(raw_path)
    if path is not None:
        return path
    if default is None:
        raise InvalidRequest("path: name a file or directory inside the folder (path, or "
                             "raw_path for a name that is not UTF-8)", field="path",
                             code="path_not_allowed")
    return default


async def listing(fs: StorageFS, access: Access, path: str, limit: int) -> FolderListing:
    path = rule_dir(path)
    entries, truncated = await _in_folder(fs, access, lambda top: fs.listing(top, path, limit))
    return FolderListing(folder_id=access.folder.id, path=shown(path), raw_path=raw_form(path),
                         entries=[_public(e) for e in entries], truncated=truncated)


async def upload_state(fs: StorageFS, access: Access, user: UserRow, path: str) -> UploadState:
    path = rule(path)
    name = fs.partial_name(access.folder.id, user.id, path)
    return UploadState(path=shown(path), offset=await asyncio.to_thread(fs.partial_size, name))


async def upload_file(
    db: AsyncSession, fs: StorageFS, access: Access, user: UserRow, path: str, *, size: int,
    offset: int, body: AsyncIterator[bytes],
) -> FileEntry | UploadState:
    """Receive bytes ``offset``..``size`` of file ``path``; the file once all ``size`` bytes
    are in, else how many the manager holds (the client resumes from there). The whole
    ``size`` is reserved first, held by the partial file until it is finished or expires."""
    path = rule(path)
    access.require_write()
    if not 0 <= offset <= size:
        raise InvalidRequest(f"offset {offset} is outside the file's {size} bytes",
                             field="offset")
    name = fs.partial_name(access.folder.id, user.id, path)
    part = await asyncio.to_thread(_open_partial, fs, name, offset)
    try:  # under the partial's lock: one request at a time reserves for it
        await reserve(db, access.folder, name, user.id, size)
        received = await _receive(part, offset, size, body)
    finally:
        os.close(part)
    if received < size:
        return UploadState(path=shown(path), offset=received)
    replaced = await _in_folder(fs, access, lambda top: _size_of(fs, top, path))
    entry = await _in_folder(fs, access, lambda top: _place_partial(fs, top, path, name))
    await finish(db, name, access.folder.id, size - (replaced or 0),
                 0 if replaced is not None else 1)
    return _public(entry)


async def download(fs: StorageFS, access: Access, path: str, start: int = 0) -> Download:
    """Regular file ``path`` from byte ``start`` (a ``Range: bytes=start-`` request)."""
    path = rule(path)
    fd, size = await _in_folder(fs, access, lambda top: fs.open_file(top, path))
    if start > size:
        os.close(fd)
        raise InvalidRequest(f"the file has {size} bytes; cannot start at {start}",
                             field="range", code="range_not_satisfiable")
    return Download(file_stream(fd, start), size, start)


def download_archive(fs: StorageFS, access: Access, path: str) -> Iterator[bytes]:
    """Directory ``path`` as a tar stream (made as it is sent)."""
    path = rule_dir(path)
    top = fs.folder_fd(access.folder.storage_path)
    try:
        os.close(fs.walk(top, path))  # a missing directory or a link: refused before any byte
    except BaseException:
        os.close(top)
        raise
    return archive.tar_stream(fs, top, path)


async def upload_archive(
    db: AsyncSession, fs: StorageFS, access: Access, user: UserRow, path: str,
    body: AsyncIterator[bytes], *, max_entries: int,
) -> ArchiveUploaded:
    """Unpack a tar stream into directory ``path`` (made if needed), all or nothing. Its
    files' bytes are reserved as their headers announce them, before they are written."""
    path = rule_dir(path)
    access.require_write()
    key, loop, held = f"archive-{secrets.token_hex(8)}", asyncio.get_running_loop(), 0

    def cover(total: int) -> None:  # in the unpacking thread
        nonlocal held
        if total > held:
            held = asyncio.run_coroutine_threadsafe(reserve(
                db, access.folder, key, user.id, total, spare=ARCHIVE_SPARE), loop).result()

    top = await asyncio.to_thread(fs.folder_fd, access.folder.storage_path)
    try:
        done = await archive.unpack(fs, top, path, body, cover=cover, max_entries=max_entries)
    except BaseException as exc:
        await asyncio.shield(release(db, key))
        if isinstance(exc, OSError):
            raise _io_error(exc) from None
        raise
    finally:
        os.close(top)
    await finish(db, key, access.folder.id, done.bytes, done.files)
    return ArchiveUploaded(path=shown(path), files=done.files, dirs=done.dirs, bytes=done.bytes)


async def remove(fs: StorageFS, access: Access, path: str) -> None:
    """Delete a file, or a directory with all it holds (links are removed, not followed)."""
    path = rule(path)
    access.require_write()
    await _in_folder(fs, access, lambda top: fs.remove(top, path))


async def make_dirs(fs: StorageFS, access: Access, path: str) -> FileEntry:
    path = rule(path)
    access.require_write()
    return _public(await _in_folder(fs, access, lambda top: fs.make_dirs(top, path)))


# ------------------------------------------------------------------ helpers


async def _in_folder(fs: StorageFS, access: Access, op: Callable[[int], T]) -> T:
    def run() -> T:
        top = fs.folder_fd(access.folder.storage_path)
        try:
            return op(top)
        finally:
            os.close(top)

    try:
        return await asyncio.to_thread(run)
    except OSError as exc:
        raise _io_error(exc) from None


async def _receive(part: int, offset: int, size: int, body: AsyncIterator[bytes]) -> int:
    """Write the body to ``part`` from ``offset``; the bytes now held. Pieces are gathered to
    about 1 MiB and written in a thread while the next ones arrive (one write in flight)."""
    received, pieces, gathered = offset, list[bytes](), 0
    writing: asyncio.Future[None] | None = None

    async def flush() -> None:
        nonlocal writing, pieces, gathered
        if writing is not None:
            await writing
        writing = asyncio.ensure_future(asyncio.to_thread(write_all, part, b"".join(pieces)))
        pieces, gathered = [], 0

    try:
        async for chunk in body:
            if received + len(chunk) > size:
                raise InvalidRequest(f"the body holds more than the {size - offset} bytes "
                                     "announced (size - offset)", field="size")
            pieces.append(chunk)
            gathered += len(chunk)
            received += len(chunk)
            if gathered >= CHUNK:
                await flush()
    except ClientDisconnect:
        pass  # keep what came: the client resumes from it
    finally:
        if pieces:
            await flush()
        if writing is not None:
            await writing
    return received


def _open_partial(fs: StorageFS, name: str, offset: int) -> int:
    part = fs.open_partial(name, offset)
    fs.own_fd(part, FILE_MODE)
    return part


def _place_partial(fs: StorageFS, top: int, path: str, name: str) -> Entry:
    uploads = fs.uploads_fd()
    try:
        return fs.place(top, path, uploads, name)
    finally:
        os.close(uploads)


def _size_of(fs: StorageFS, top: int, path: str) -> int | None:
    try:
        entry = fs.entry(top, path)
    except NotFound:
        return None
    return entry.size


def _public(entry: Entry) -> FileEntry:
    # A name a session wrote may not be UTF-8: shown readable, addressable by its raw form.
    return FileEntry(path=shown(entry.path), raw_path=raw_form(entry.path), type=entry.type,
                     size=entry.size, modified_at=entry.modified_at)


def _io_error(exc: OSError) -> Conflict:
    return Conflict(f"the storage refused: {exc.strerror or exc}", code="storage_error")
