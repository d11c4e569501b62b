"""Directories in and out of folders as tar streams, never held whole in memory.

Out: a tar stream made on the fly from descriptor-walked files (1 MiB reads), with regular
files and directories only: links, devices, pipes and sockets are left out (a link could point
outside the folder; a device file is no data). In: a tar (or tar.gz) stream fed from the
request body (``manager.threads``: bounded memory) to a thread that extracts into a staging
directory beside the folders; every entry's name must pass the path rules and be a file or a
directory. Only a complete, valid archive is moved into the folder (file by file, each
atomically): a broken or refused one leaves the folder as it was.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tarfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from gpuslice.common.storage_paths import PathRuleError, clean_path
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.storage.fs import FILE_MODE, StorageFS
from gpuslice.manager.threads import Interrupted, feed_thread

CHUNK = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE


class QuotaExceeded(InvalidRequest):
    """More data than the owner's storage quota leaves room for."""

    code = "quota_exceeded"


@dataclass(slots=True)
class Unpacked:
    files: int = 0
    dirs: int = 0
    bytes: int = 0


# ------------------------------------------------------------------ out


def tar_stream(fs: StorageFS, top: int, path: str) -> Iterator[bytes]:
    """A tar of directory ``path`` of the folder open as ``top`` (which it closes), in chunks.
    Names are relative to ``path``."""
    fd = fs.walk(top, path)
    os.close(top)
    pending = bytearray()
    try:
        for piece in _tar_dir(fd, ""):
            pending += piece
            if len(pending) >= CHUNK:
                yield bytes(pending)
                pending.clear()
        pending += b"\0" * (2 * BLOCK)  # the end-of-archive marker
        yield bytes(pending)
    finally:
        os.close(fd)


def _tar_dir(fd: int, prefix: str) -> Iterator[bytes]:
    with os.scandir(fd) as found:
        names = sorted(entry.name for entry in found)
    for name in names:
        rel = f"{prefix}{name}"
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed meanwhile
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # replaced by a link or removed meanwhile: left out
            try:
                yield _header(rel + "/", tarfile.DIRTYPE, 0, st)
                yield from _tar_dir(sub, rel + "/")
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            yield from _tar_file(fd, name, rel)


def _tar_file(dir_fd: int, name: str, rel: str) -> Iterator[bytes]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        size = st.st_size
        yield _header(rel, tarfile.REGTYPE, size, st)
        sent = 0
        while sent < size:  # the size in the header is what is sent, whatever the file does
            data = os.pread(fd, min(CHUNK, size - sent), sent)
            if not data:
                data = b"\0" * (size - sent)  # it shrank while being read
            sent += len(data)
            yield data
        if size % BLOCK:
            yield b"\0" * (BLOCK - size % BLOCK)
    finally:
        os.close(fd)


def _header(name: str, kind: bytes, size: int, st: os.stat_result) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    return info.tobuf(format=tarfile.PAX_FORMAT)


# ------------------------------------------------------------------ in


async def unpack(
    fs: StorageFS, top: int, path: str, body: AsyncIterator[bytes], *,
    cover: Callable[[int], None] | None, max_entries: int,
) -> Unpacked:
    """Extract the tar in ``body`` into directory ``path`` of the folder open as ``top``.

    ``cover``: called (in the unpacking thread) with the bytes of the files so far before
    each file's are written; it raises ``QuotaExceeded`` when the owner's quota has no room
    for them (None: no limit). Raises ``InvalidRequest`` naming a refused entry,
    ``QuotaExceeded``; the folder is changed only on success.
    """
    try:
        return await feed_thread(
            body, lambda reader: _extract_and_place(fs, top, path, reader, cover, max_entries)
        )
    except Interrupted:
        raise InvalidRequest("the upload was interrupted", code="upload_interrupted") from None


def _extract_and_place(
    fs: StorageFS, top: int, path: str, reader: BinaryIO, cover: Callable[[int], None] | None,
    max_entries: int,
) -> Unpacked:
    uploads = fs.uploads_fd()
    staging_name = f"archive-{secrets.token_hex(8)}"
    os.mkdir(staging_name, 0o700, dir_fd=uploads)
    staging = os.open(staging_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                      dir_fd=uploads)
    try:
        done = _extract(fs, staging, reader, cover, max_entries)
        target = fs.walk(top, path, create=True)
        try:
            _merge(fs, staging, target, path)
        finally:
            os.close(target)
        return done
    finally:
        os.close(staging)
        shutil.rmtree(staging_name, dir_fd=uploads, ignore_errors=True)
        os.close(uploads)


def _extract(
    fs: StorageFS, staging: int, reader: BinaryIO, cover: Callable[[int], None] | None,
    max_entries: int,
) -> Unpacked:
    done = Unpacked()
    try:
        with tarfile.open(fileobj=reader, mode="r|*") as tar:
            for member in tar:
                if done.files + done.dirs >= max_entries:
                    raise InvalidRequest(f"the archive holds more than {max_entries} entries",
                                         code="archive_too_large")
                name = _member_name(member)
                if member.isdir():
                    os.close(fs.walk(staging, name, create=True))
                    done.dirs += 1
                elif member.isreg():
                    done.bytes += member.size
                    if cover is not None:
                        cover(done.bytes)
                    _extract_file(fs, staging, name, tar, member)
                    done.files += 1
                else:
                    raise InvalidRequest(
                        f"archive entry {member.name!r} is {_kind(member)}: only files and "
                        "directories are accepted", field="path", code="path_not_allowed",
                    )
    except tarfile.TarError as err:
        raise InvalidRequest(f"not a valid tar archive: {err}", code="bad_archive") from None
    return done


def _member_name(member: tarfile.TarInfo) -> str:
    try:
        return clean_path(member.name)
    except PathRuleError as err:
        raise InvalidRequest(f"archive entry {err}", field="path",
                             code="path_not_allowed") from None


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return "a link"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a pipe"
    return "not a file"


def _extract_file(
    fs: StorageFS, staging: int, name: str, tar: tarfile.TarFile, member: tarfile.TarInfo
) -> None:
    parent, _, base = name.rpartition("/")
    fd = fs.walk(staging, parent, create=True)
    try:
        out = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE,
                      dir_fd=fd)
    finally:
        os.close(fd)
    try:
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has one
        while data := source.read(CHUNK):
            os.write(out, data)
        fs.own_fd(out, FILE_MODE | (0o111 if member.mode & 0o100 else 0))  # keep "executable"
    finally:
        os.close(out)


def _merge(fs: StorageFS, source: int, target: int, shown: str) -> None:
    """Move every file of staging directory ``source`` into ``target`` (same layout)."""
    with os.scandir(source) as found:
        names = sorted(entry.name for entry in found)
    for name in names:
        st = os.stat(name, dir_fd=source, follow_symlinks=False)
        rel = f"{shown}/{name}" if shown else name
        if stat.S_ISDIR(st.st_mode):
            sub_source = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                 dir_fd=source)
            sub_target = fs.walk(target, name, create=True)
            try:
                _merge(fs, sub_source, sub_target, rel)
            finally:
                os.close(sub_source)
                os.close(sub_target)
        else:
            fs.place(target, name, source, name)
