"""Moving files for the SDK: directories as tar streams made on the fly, safe extraction,
reading files in pieces with a progress callback. Memory stays bounded whatever the sizes.

What goes into an upload: regular files and directories under the directory given, minus
what ``ignore`` says (``.gitignore``-like patterns: ``*.ckpt``, ``data/``, ``/build``); links
and special files are left out (and reported), since the manager refuses them anyway.
"""

from __future__ import annotations

import fnmatch
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE
Progress = Callable[[int], None]  # called with the bytes just moved
#: Never worth sending with code: version control, caches, virtual environments.
DEFAULT_IGNORE = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/",
                  "node_modules/", ".ipynb_checkpoints/", ".mypy_cache/", ".pytest_cache/")
IGNORE_FILE = ".gpusliceignore"


@dataclass
class Tree:
    """The files of a directory to upload: (relative path, absolute path, size)."""

    root: Path
    files: list[tuple[str, Path, int]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # links, devices, pipes

    @property
    def size(self) -> int:
        return sum(size for _, _, size in self.files)


def scan(root: Path, ignore: Sequence[str] = ()) -> Tree:
    """What an upload of ``root`` holds, in a stable order."""
    tree = Tree(root)
    patterns = [p.strip() for p in ignore if p.strip() and not p.lstrip().startswith("#")]
    for top, dirs, names in os.walk(root):
        base = Path(top)
        rel_top = base.relative_to(root).as_posix()
        rel_top = "" if rel_top == "." else rel_top
        kept = []
        for name in sorted(dirs):
            rel = f"{rel_top}/{name}" if rel_top else name
            if os.path.islink(base / name):
                tree.skipped.append(rel)
            elif not ignored(rel, True, patterns):
                kept.append(name)
                tree.dirs.append(rel)
        dirs[:] = kept
        for name in sorted(names):
            rel = f"{rel_top}/{name}" if rel_top else name
            if ignored(rel, False, patterns):
                continue
            st = os.lstat(base / name)
            if stat.S_ISREG(st.st_mode):
                tree.files.append((rel, base / name, st.st_size))
            else:
                tree.skipped.append(rel)
    return tree


def read_ignore(root: Path) -> list[str]:
    """The default patterns and those of ``root/.gpusliceignore`` (if any)."""
    path = root / IGNORE_FILE
    extra = path.read_text().splitlines() if path.is_file() else []
    return [*DEFAULT_IGNORE, *extra]


def ignored(rel: str, is_dir: bool, patterns: Sequence[str]) -> bool:
    """Whether ``rel`` matches a pattern: ``name`` (with ``*``, ``?``) anywhere, ``dir/``
    directories only, ``/path`` or ``a/b*`` from the top (there ``*`` may cross a ``/``).
    A directory that matches is left out with everything in it."""
    parts = rel.split("/")
    for raw in patterns:
        pattern = raw.rstrip("/")
        if raw.endswith("/") and not is_dir:
            continue
        anchored = pattern.startswith("/") or "/" in pattern
        pattern = pattern.lstrip("/")
        if anchored:
            if fnmatch.fnmatchcase(rel, pattern):  # fnmatch's * crosses "/", like **
                return True
        elif fnmatch.fnmatchcase(parts[-1], pattern):
            return True
    return False


def tar_chunks(tree: Tree, progress: Progress | None = None) -> Iterator[bytes]:
    """An uncompressed tar of ``tree``, in pieces of about 1 MiB (files are read as it goes:
    a file's size is the one scanned; a file that changed size since is padded or cut)."""
    pending = bytearray()
    for rel in tree.dirs:
        pending += _header(rel + "/", tarfile.DIRTYPE, 0, 0o755)
    for rel, path, size in tree.files:
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        pending += _header(rel, tarfile.REGTYPE, size, mode)
        with open(path, "rb") as source:
            left = size
            while left:
                data = source.read(min(CHUNK, left)) or b"\0" * left
                left -= len(data)
                pending += data
                if progress:
                    progress(len(data))
                if len(pending) >= CHUNK:
                    yield bytes(pending)
                    pending.clear()
        if size % BLOCK:
            pending += b"\0" * (BLOCK - size % BLOCK)
    pending += b"\0" * (2 * BLOCK)
    yield bytes(pending)


def file_chunks(source: BinaryIO, progress: Progress | None = None) -> Iterator[bytes]:
    while data := source.read(CHUNK):
        if progress:
            progress(len(data))
        yield data


def extract(chunks: Iterator[bytes | memoryview], target: Path,
            progress: Progress | None = None) -> int:
    """Unpack a tar stream into ``target`` with the standard library's ``data`` filter (no
    absolute paths, no ``..``, no links out, no devices); how many files came."""
    target.mkdir(parents=True, exist_ok=True)
    reader = io.BufferedReader(_ChunkReader(chunks, progress), CHUNK)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        count = 0
        for member in tar:
            tar.extract(member, target, filter="data")
            count += member.isfile()
    return count


def _header(name: str, kind: bytes, size: int, mode: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, size, mode
    return info.tobuf(format=tarfile.PAX_FORMAT)


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte strings (no copies beyond one piece)."""

    def __init__(self, chunks: Iterator[bytes | memoryview], progress: Progress | None) -> None:
        self.chunks = chunks  # a piece may be a reused buffer: it is used up before the next
        self.progress = progress
        self.piece = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self.piece:
            piece = next(self.chunks, None)
            if piece is None:
                return 0
            if self.progress:
                self.progress(len(piece))
            self.piece = memoryview(piece)
        size = min(len(target), len(self.piece))
        target[:size] = self.piece[:size]
        self.piece = self.piece[size:]
        return size
