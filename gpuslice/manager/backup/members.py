"""The file areas of a backup: the directories a platform keeps beside its database.

An area (``data``: the data directory's own files, such as ``admin-credentials`` and the local
agent's state; ``storage``: every storage folder, ``runs/<name>/`` included; ``models``: the
local model store with its ``.signing-key``) is walked once to count its entries for the
header, then streamed entry by entry: a line per entry (kind, path, mode, owner, mtime), and
for a file its content as base64 chunk lines of at most ``CHUNK`` bytes followed by an end line
with its size and SHA-256. Nothing is held in memory beyond a chunk.

A restore extracts each area into a private staging directory beside its target, checking every
file's SHA-256 as it goes; `place` renames the staged trees into place only once everything
(the database included) has been restored, so a failure leaves the targets as they were.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from pydantic import BaseModel, ValidationError

from gpuslice.manager.backup.fileformat import AreaInfo, BackupError, Reader, Writer

CHUNK = 1024**2
FileProgress = Callable[[str, int, int], None]  # (area/path, bytes done in all, bytes in all)


class Entry(BaseModel):
    area: str
    kind: Literal["dir", "file", "link", "gone"]
    path: str
    mode: int = 0
    uid: int = -1
    gid: int = -1
    mtime: float = 0.0
    target: str | None = None  # a link's


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

    def info(self) -> AreaInfo:
        if self.external is not None:
            return AreaInfo(name=self.name, source=str(self.root), external=self.external)
        size = 0
        for rel in self.plan:
            with contextlib.suppress(FileNotFoundError):  # deleted while counted
                st = (self.root / rel).lstat()
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        top = sorted({rel.parts[0] for rel in self.plan})
        return AreaInfo(name=self.name, source=str(self.root), entries=len(self.plan),
                        bytes=size, top=top)


def walk(area: Area) -> Area:
    """The area with its entries listed (parents before children, in a stable order)."""
    if area.external is not None or not area.root.is_dir():
        return area
    found: list[Path] = []
    for top, dirs, files in os.walk(area.root, onerror=_walk_error):
        here = Path(top)
        dirs[:] = sorted(d for d in dirs if here / d not in area.skip)
        for name in [*dirs, *sorted(files)]:
            if here / name not in area.skip:
                found.append((here / name).relative_to(area.root))
    found.sort(key=lambda p: p.parts)
    return Area(area.name, area.root, area.skip, area.external, found)


def write_area(area: Area, out: Writer, progress: FileProgress | None, total: int) -> int:
    """Stream the area's planned entries; returns how many vanished while the backup ran."""
    gone = 0
    for rel in area.plan:
        path = area.root / rel
        try:
            st = path.lstat()
        except FileNotFoundError:
            st = None
        if st is None or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)
                              or stat.S_ISLNK(st.st_mode)):
            # deleted meanwhile, or a socket or FIFO: nothing to keep, but the count holds
            out.entry(Entry(area=area.name, kind="gone", path=rel.as_posix()))
            gone += 1
            continue
        entry = Entry(area=area.name, kind=_kind(st.st_mode), path=rel.as_posix(),
                      mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid,
                      mtime=st.st_mtime)
        if entry.kind == "link":
            entry.target = os.readlink(path)
        out.entry(entry)
        if entry.kind == "file":
            _write_content(path, out, progress, total, f"{area.name}/{entry.path}")
    return gone


def extract(reader: Reader, info: AreaInfo, staging: Path | None,
            progress: FileProgress | None, total: int) -> None:
    """Read the area's entries from the backup into ``staging`` (made here, 0700), checking
    each file's hash; with ``staging`` None only check them."""
    if staging is not None:
        staging.mkdir(parents=True, mode=0o700)
    dirs: list[tuple[Path, Entry]] = []
    for _ in range(info.entries):
        entry = _entry(reader, info.name)
        if entry.kind == "gone":
            continue
        rel = _safe(entry.path, reader)
        if staging is None:
            if entry.kind == "file":
                _read_content(reader, None, entry, progress, total)
            continue
        path = staging / rel
        if entry.kind == "dir":
            path.mkdir(mode=0o700, exist_ok=True)
            dirs.append((path, entry))  # its mode and mtime once its content is written
        elif entry.kind == "link":
            os.symlink(entry.target or "", path)
        else:
            _read_content(reader, path, entry, progress, total)
            _own(path, entry)
    for path, entry in reversed(dirs):
        _own(path, entry)


def staging_for(target: Path) -> Path:
    return target.with_name(f".{target.name}.restoring")


def conflicts(target: Path, names: set[str] | None) -> list[str]:
    """What already is at ``target`` that a restore would replace: everything in it (``names``
    None), or those of ``names`` it holds."""
    if not target.is_dir():
        return [str(target)] if target.exists() else []
    held = sorted(p.name for p in target.iterdir())
    return held if names is None else [n for n in held if n in names]


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


def _kind(mode: int) -> Literal["dir", "file", "link"]:
    if stat.S_ISDIR(mode):
        return "dir"
    return "link" if stat.S_ISLNK(mode) else "file"


def _write_content(path: Path, out: Writer, progress: FileProgress | None, total: int,
                   label: str) -> None:
    digest, size = hashlib.sha256(), 0
    try:
        with path.open("rb") as src:
            while data := src.read(CHUNK):
                digest.update(data)
                size += len(data)
                out.chunk(data)
                if progress is not None:
                    progress(label, out.bytes, total)
    except FileNotFoundError:
        pass  # removed between its listing and its reading: kept as far as it was read
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
    out.entry_end(EntryEnd(size=size, sha256=digest.hexdigest()))


def _read_content(reader: Reader, path: Path | None, entry: Entry,
                  progress: FileProgress | None, total: int) -> None:
    digest, size = hashlib.sha256(), 0
    if path is None:
        dst: IO[bytes] = open(os.devnull, "wb")  # noqa: SIM115  # closed by the with
    else:
        dst = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")
    with dst:
        while True:
            line = reader.line(f"the content of {entry.area}/{entry.path}")
            if not isinstance(line, str):
                break
            data = _b64(line, reader, entry)
            digest.update(data)
            size += len(data)
            reader.bytes_read += len(data)
            dst.write(data)
            if progress is not None:
                progress(f"{entry.area}/{entry.path}", reader.bytes_read, total)
    try:
        end = EntryEnd.model_validate(line)
    except ValidationError:
        raise reader.damaged(f"{entry.area}/{entry.path} has no end line") from None
    if end.size != size or end.sha256 != digest.hexdigest():
        raise reader.damaged(f"{entry.area}/{entry.path}: its content does not match its "
                             f"SHA-256 ({size} bytes read, {end.size} recorded)")


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


def _safe(rel: str, reader: Reader) -> Path:
    # a crafted backup must not write outside its staging directory
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise reader.damaged(f"entry path {rel!r} leaves its area")
    return Path(*pure.parts)


def _own(path: Path, entry: Entry) -> None:
    if os.geteuid() == 0 and entry.uid >= 0:
        os.chown(path, entry.uid, entry.gid, follow_symlinks=False)
    os.chmod(path, entry.mode)
    os.utime(path, (entry.mtime, entry.mtime))


def _replace(new: Path, old: Path) -> None:
    aside = old.with_name(f".{old.name}.replaced")
    had = old.exists() or old.is_symlink()
    if had:
        remove(aside)
        os.replace(old, aside)
    os.replace(new, old)
    if had:
        remove(aside)


def _walk_error(err: OSError) -> None:
    raise BackupError(f"cannot read {err.filename}: {err.strerror or err}")
