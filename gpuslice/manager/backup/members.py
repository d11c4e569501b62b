"""The file areas of a backup: the directories a platform keeps beside its database.

An area (``data``: the data directory's own files, such as ``admin-credentials`` and the local
agent's state; ``storage``: every storage folder, ``runs/<name>/`` included; ``models``: the
local model store with its ``.signing-key``) is walked once to count its entries for the
header, then streamed entry by entry: a line per entry (kind, path, mode, owner, mtime), and
for a file its content as base64 chunk lines of at most ``CHUNK`` bytes followed by an end line
with its size and SHA-256. Nothing is held in memory beyond a chunk.

Users write to the storage area from their sessions while a backup runs, so the area is read
descriptor by descriptor from an fd opened on its root, every step ``O_NOFOLLOW``, what was
opened ``fstat``ed, never through a path checked earlier (as ``services/storage/fs.py`` does):
a directory swapped for a symbolic link meanwhile is recorded as the link, and what was planned
under it as gone, so a backup never holds a file from outside its area. Entries come parents
first, in the order of their paths.

A restore extracts each area into a private staging directory beside its target, checking every
file's SHA-256 as it goes, descriptor-relative and ``O_NOFOLLOW`` from the staging fd: an entry
must follow the one before it in that order and lie under a directory entry of the backup, so
one whose path passes through a link (or a file) is refused, by ``--check`` as by the restore.
`place` renames the staged trees into place only once everything (the database included) has
been restored, so a failure leaves the targets as they were.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ValidationError

from gpuslice.common.storage_paths import from_raw, raw_form, shown
from gpuslice.manager.backup.fileformat import AreaInfo, BackupError, Reader, Writer

CHUNK = 1024**2
FileProgress = Callable[[str, int, int], None]  # (area/path, bytes done in all, bytes in all)
FILE_BITS = 0o777  # restored modes: never setuid or setgid
DIR_BITS = 0o1777
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not hang
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Entry(BaseModel):
    area: str
    kind: Literal["dir", "file", "link", "gone"]
    path: str  # readable; a name that is not UTF-8 is in raw_path too
    raw_path: str | None = None  # the path's bytes percent-encoded (storage_paths.raw_form)
    mode: int = 0
    uid: int = -1
    gid: int = -1
    mtime: float = 0.0
    target: str | None = None  # a link's
    raw_target: str | None = None

    @classmethod
    def of(cls, area: str, kind: Literal["dir", "file", "link", "gone"], rel: str,
           st: os.stat_result | None = None, target: str | None = None) -> Entry:
        entry = cls(area=area, kind=kind, path=shown(rel), raw_path=raw_form(rel))
        if st is not None:
            entry.mode, entry.uid, entry.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
            entry.mtime = st.st_mtime
        if target is not None:
            entry.target, entry.raw_target = shown(target), raw_form(target)
        return entry

    def name(self) -> str:
        return self.path if self.raw_path is None else from_raw(self.raw_path)

    def link_target(self) -> str:
        if self.raw_target is not None:
            return from_raw(self.raw_target)
        return self.target or ""


class EntryEnd(BaseModel):
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Area:
    """An area to back up: its root and what under it is not part of it."""

    name: Literal["data", "storage", "models"]
    root: Path
    skip: frozenset[Path] = frozenset()
    external: str | None = None
    plan: list[Path] = field(default_factory=list)
    size: int = 0  # of the planned files, when they were walked

    def info(self) -> AreaInfo:
        if self.external is not None:
            return AreaInfo(name=self.name, source=str(self.root), external=self.external)
        top = sorted({shown(rel.parts[0]) for rel in self.plan})  # readable, as JSON must be
        return AreaInfo(name=self.name, source=str(self.root), entries=len(self.plan),
                        bytes=self.size, top=top)


def walk(area: Area) -> Area:
    """The area with its entries listed (parents before children, in the order of their
    paths), walked by descriptor: a link is listed, never followed."""
    if area.external is not None or not area.root.is_dir():
        return area
    found: list[Path] = []
    size = 0
    root = _open_root(area.root)
    pending: list[tuple[int, Path, list[str]]] = [(root, Path(), _names(root, area.root))]
    try:
        while pending:
            fd, rel, names = pending[-1]
            if not names:
                os.close(fd)
                pending.pop()
                continue
            name = names.pop()
            if area.root / rel / name in area.skip:
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted meanwhile
            found.append(rel / name)
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if stat.S_ISDIR(st.st_mode):
                sub = _open(fd, name, _DIR, area.root / rel / name)
                if sub is not None:
                    pending.append((sub, rel / name, _names(sub, area.root / rel / name)))
    finally:
        for fd, _rel, _left in pending:
            os.close(fd)
    return Area(area.name, area.root, area.skip, area.external, found, size)


def write_area(area: Area, out: Writer, progress: FileProgress | None, total: int) -> int:
    """Stream the area's planned entries; returns how many vanished while the backup ran.

    Each entry is reached from the directory entry before it by one ``O_NOFOLLOW`` step; one
    whose directory is no longer what was recorded (deleted, or swapped for a link) is gone.
    """
    if not area.plan:
        return 0
    gone = 0
    tree = _Tree(_open_root(area.root))
    try:
        for rel in area.plan:
            path = rel.as_posix()
            parent = tree.fd if tree.enter(rel.parts) else None
            taken = None if parent is None else _take(parent, rel, area)
            if taken is None:
                # deleted meanwhile, swapped, or a socket or FIFO: nothing kept, the count holds
                out.entry(Entry.of(area.name, "gone", path))
                gone += 1
                continue
            entry, fd = taken
            out.entry(entry)
            if entry.kind == "dir":
                tree.push(rel.parts, fd)
            elif fd is not None:
                try:
                    _write_content(fd, out, progress, total, f"{area.name}/{entry.path}")
                finally:
                    os.close(fd)
    finally:
        tree.close()
    return gone


def extract(reader: Reader, info: AreaInfo, staging: Path | None,
            progress: FileProgress | None, total: int) -> None:
    """Read the area's entries from the backup into ``staging`` (made here, 0700), checking
    each file's hash and where each entry lies; with ``staging`` None only check them."""
    tree = _Tree(None)
    if staging is not None:
        staging.mkdir(parents=True, mode=0o700)
        tree = _Tree(os.open(staging, _DIR))
    try:
        for _ in range(info.entries):
            entry = _entry(reader, info.name)
            if entry.kind == "gone":
                continue
            parts = _safe(entry, reader)
            if not tree.enter(parts):
                raise reader.damaged(
                    f"entry {info.name}/{entry.path} is not under a directory the backup holds "
                    "before it (a link or a file is on its way, or entries are out of order): "
                    "gpuslice never writes that, the file was made or changed by hand")
            parent = tree.fd
            if parent is None:  # only checking
                if entry.kind == "file":
                    _read_content(reader, None, entry, progress, total)
                elif entry.kind == "dir":
                    tree.push(parts, None)
                continue
            made = _put(reader, parent, parts[-1], entry, progress, total)
            if made is not None:
                tree.push(parts, made, entry)
        tree.close(apply=True)
    finally:
        tree.close()


def staging_for(target: Path) -> Path:
    return target.with_name(f".{target.name}.restoring")


def conflicts(target: Path, names: set[str] | None) -> list[str]:
    """What already is at ``target`` that a restore would replace: everything in it (``names``
    None), or those of ``names`` it holds."""
    if not target.is_dir():
        return [str(target)] if target.exists() else []
    held = sorted(p.name for p in target.iterdir())
    return held if names is None else [n for n in held if shown(n) in names]


def place(staging: Path, target: Path, merge: bool) -> None:
    """Move a staged area into place: the whole tree (replacing what ``--force`` allowed), or
    with ``merge`` (the data directory, which holds the database) its top-level entries."""
    if merge:
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        for item in sorted(staging.iterdir()):
            _replace(item, target / item.name)
        staging.rmdir()
    else:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _replace(staging, target)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------ helpers


class _Tree:
    """The directories on the way to the current entry, from the area's root: each with its
    descriptor (None when only checking) and, when extracting, its entry, whose owner, mode and
    mtime are applied once its content is complete (when it is left). Entries come in the
    order of their paths, each under the last directory entry on its way."""

    def __init__(self, root: int | None) -> None:
        self.stack: list[tuple[tuple[str, ...], int | None, Entry | None]] = [((), root, None)]
        self.last: tuple[str, ...] = ()

    @property
    def fd(self) -> int | None:
        return self.stack[-1][1]

    def enter(self, parts: tuple[str, ...]) -> bool:
        """Leave the directories ``parts`` is not in; whether its own directory is the one
        reached (then `fd` is it) and it comes after the entry before it."""
        if parts <= self.last:
            return False
        self.last = parts
        while len(self.stack) > 1 and self.stack[-1][0] != parts[:len(self.stack[-1][0])]:
            self._leave(apply=True)
        return self.stack[-1][0] == parts[:-1]

    def push(self, parts: tuple[str, ...], fd: int | None, entry: Entry | None = None) -> None:
        self.stack.append((parts, fd, entry))

    def close(self, apply: bool = False) -> None:
        """Leave every directory (applying their entries with ``apply``), close the root."""
        while len(self.stack) > 1:
            self._leave(apply)
        if self.stack:
            root = self.stack.pop()[1]
            if root is not None:
                os.close(root)

    def _leave(self, apply: bool) -> None:
        _parts, fd, entry = self.stack.pop()
        if fd is None:
            return
        try:
            if apply and entry is not None:
                _own(fd, entry, DIR_BITS)
        finally:
            os.close(fd)


def _kind(mode: int) -> Literal["dir", "file", "link"] | None:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "link" if stat.S_ISLNK(mode) else None


def _take(parent: int, rel: Path, area: Area) -> tuple[Entry, int | None] | None:
    """The entry ``rel`` (named by its last part in directory ``parent``) and, for a directory
    or a file, its descriptor, ``fstat``ed; None when it is gone or neither of the three."""
    name, path = rel.name, rel.as_posix()
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unreadable(area, rel, exc) from None
    kind = _kind(st.st_mode)
    if kind is None:
        return None
    if kind == "link":
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINVAL):  # gone, or no longer a link
                return None
            raise _unreadable(area, rel, exc) from None
        return Entry.of(area.name, "link", path, st, target), None
    fd = _open(parent, name, _DIR if kind == "dir" else _FILE, area.root / rel)
    if fd is None:
        return None
    st = os.fstat(fd)
    if _kind(st.st_mode) != kind:  # swapped between the two looks
        os.close(fd)
        return None
    return Entry.of(area.name, kind, path, st), fd


def _open(parent: int, name: str, flags: int, shown: Path) -> int | None:
    """``name`` in ``parent``, never through a link; None when it went or became one."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise BackupError(f"cannot read {shown}: {exc.strerror or exc}") from None


def _open_root(root: Path) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise BackupError(f"cannot read {root}: {exc.strerror or exc}") from None


def _names(fd: int, shown: Path) -> list[str]:
    try:
        with os.scandir(fd) as found:
            return sorted((entry.name for entry in found), reverse=True)  # popped from the end
    except OSError as exc:
        raise BackupError(f"cannot read {shown}: {exc.strerror or exc}") from None


def _unreadable(area: Area, rel: Path, exc: OSError) -> BackupError:
    return BackupError(f"cannot read {area.root / rel}: {exc.strerror or exc}")


def _write_content(fd: int, out: Writer, progress: FileProgress | None, total: int,
                   label: str) -> None:
    digest, size = hashlib.sha256(), 0
    try:
        while data := os.read(fd, CHUNK):
            digest.update(data)
            size += len(data)
            out.chunk(data)
            if progress is not None:
                progress(label, out.bytes, total)
    except OSError as exc:
        raise BackupError(f"cannot read {label}: {exc.strerror or exc}") from None
    out.entry_end(EntryEnd(size=size, sha256=digest.hexdigest()))


def _put(reader: Reader, parent: int, name: str, entry: Entry, progress: FileProgress | None,
         total: int) -> int | None:
    """Make ``entry`` as ``name`` in directory ``parent``, never through a link; for a
    directory, returns its descriptor."""
    try:
        if entry.kind == "dir":
            os.mkdir(name, 0o700, dir_fd=parent)
            return os.open(name, _DIR, dir_fd=parent)
        if entry.kind == "link":
            target = entry.link_target()
            if "\x00" in target:
                raise reader.damaged(f"link {entry.area}/{entry.path} has a NUL in its target")
            os.symlink(target, name, dir_fd=parent)
            return None
        fd = os.open(name, _NEW_FILE, 0o600, dir_fd=parent)
    except OSError as exc:
        raise BackupError(f"cannot write {entry.area}/{entry.path} into the staging "
                          f"directory: {exc.strerror or exc}") from None
    try:
        _read_content(reader, fd, entry, progress, total)
        _own(fd, entry, FILE_BITS)
    finally:
        os.close(fd)
    return None


def _read_content(reader: Reader, fd: int | None, entry: Entry,
                  progress: FileProgress | None, total: int) -> None:
    digest, size = hashlib.sha256(), 0
    while True:
        line = reader.line(f"the content of {entry.area}/{entry.path}")
        if not isinstance(line, str):
            break
        data = _b64(line, reader, entry)
        digest.update(data)
        size += len(data)
        reader.bytes_read += len(data)
        if fd is not None:
            _write_all(fd, data)
        if progress is not None:
            progress(f"{entry.area}/{entry.path}", reader.bytes_read, total)
    try:
        end = EntryEnd.model_validate(line)
    except ValidationError:
        raise reader.damaged(f"{entry.area}/{entry.path} has no end line") from None
    if end.size != size or end.sha256 != digest.hexdigest():
        raise reader.damaged(f"{entry.area}/{entry.path}: its content does not match its "
                             f"SHA-256 ({size} bytes read, {end.size} recorded)")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _b64(line: str, reader: Reader, entry: Entry) -> bytes:
    try:
        return base64.b64decode(line, validate=True)
    except (binascii.Error, ValueError):
        raise reader.damaged(f"{entry.area}/{entry.path}: a chunk is not base64") from None


def _entry(reader: Reader, area: str) -> Entry:
    line = reader.line(f"an entry of area {area}")
    try:
        entry = Entry.model_validate(line)
    except ValidationError:
        raise reader.damaged(f"an entry of area {area} is not valid") from None
    if entry.area != area:
        raise reader.damaged(f"an entry of area {entry.area} where {area} was expected")
    return entry


def _safe(entry: Entry, reader: Reader) -> tuple[str, ...]:
    # a crafted backup must not write outside its staging directory: no `..`, not absolute;
    # links on the way are refused where the entry is placed (`_Tree.enter`, O_NOFOLLOW)
    rel = entry.name()
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\x00" in rel:
        raise reader.damaged(f"entry path {rel!r} leaves its area")
    return pure.parts


def _own(fd: int, entry: Entry, bits: int) -> None:
    """The entry's owner (as root), mode and mtime, through the descriptor made for it."""
    if os.geteuid() == 0 and entry.uid >= 0:
        os.fchown(fd, entry.uid, entry.gid)
    os.fchmod(fd, entry.mode & bits)
    os.utime(fd, (entry.mtime, entry.mtime))


def _replace(new: Path, old: Path) -> None:
    aside = old.with_name(f".{old.name}.replaced")
    had = old.exists() or old.is_symlink()
    if had:
        remove(aside)
        os.replace(old, aside)
    os.replace(new, old)
    if had:
        remove(aside)
