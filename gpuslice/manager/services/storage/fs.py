"""Files of storage folders on disk, reached only by descriptor-relative, link-refusing steps.

Every path a user gives is cleaned first (``common.storage_paths.clean_path``: no ``..``, not
absolute) and then walked one component at a time from the folder's own directory with
``O_NOFOLLOW``: a symbolic link anywhere on the way is refused, never followed, so nothing a
session writes (``ln -s /etc x``) can make the manager read or write outside the folder, and
there is no window between a check and a use. Only regular files are read; device files,
pipes and sockets are refused. Blocking calls: the services run these in a thread.

Ownership: folders and what the manager writes belong to ``owner`` (uid:gid, the agents'
``session_user``); directories 0755 (a folder's top 0770), files 0644: the session user can
read, change and delete everything, and so can the manager (root, that uid, or a manager
holding CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER, as the systemd unit runs it).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuslice.common.storage_paths import PathRuleError, clean_path
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound

DIR_MODE = 0o755
TOP_MODE = 0o770
FILE_MODE = 0o644
PRIVATE_MODE = 0o700
UPLOADS = ".uploads"  # partial uploads and archive staging, beside the folders
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    type: str  # file | dir | link | other
    size: int
    modified_at: datetime


def rule(path: str) -> str:
    """``path`` cleaned, or 422 ``path_not_allowed`` naming the rule it breaks."""
    try:
        return clean_path(path)
    except PathRuleError as err:
        raise InvalidRequest(str(err), field="path", code="path_not_allowed") from None


def rule_or_root(path: str) -> str:
    try:
        return clean_path(path, allow_root=True)
    except PathRuleError as err:
        raise InvalidRequest(str(err), field="path", code="path_not_allowed") from None


class StorageFS:
    """The storage root: folder directories under it, and the safe steps into them."""

    def __init__(self, root: Path, owner: tuple[int, int]) -> None:
        self.root = root
        self.uid, self.gid = owner
        self._chown = may_chown()

    # ------------------------------------------------------------ folders

    def prepare(self) -> None:
        """The root and its private parts (``users``, ``shared``, ``.uploads``), mode 0700."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(PRIVATE_MODE)
        for part in ("users", "shared", UPLOADS):
            (self.root / part).mkdir(mode=PRIVATE_MODE, exist_ok=True)

    def make_folder(self, storage_path: str) -> None:
        """Create a folder's directory (its parents private to the manager)."""
        os.close(self.folder_fd(storage_path))

    def remove_folder(self, storage_path: str) -> None:
        parent, _, name = storage_path.rpartition("/")
        fd = self.open_dir(parent.split("/"))
        try:
            shutil.rmtree(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def folder_fd(self, storage_path: str) -> int:
        """A descriptor of the folder's directory (created if it went missing)."""
        fd = self._root_fd()
        parts = storage_path.split("/")
        for depth, part in enumerate(parts):
            top = depth == len(parts) - 1
            fd = self._step(fd, part, create=True, mode=TOP_MODE if top else PRIVATE_MODE,
                            own=top, shown=part)
        return fd

    def open_dir(self, parts: list[str]) -> int:
        fd = self._root_fd()
        for part in parts:
            fd = self._step(fd, part, create=False, shown=part)
        return fd

    # ------------------------------------------------------------ inside a folder

    def walk(self, top: int, path: str, *, create: bool = False) -> int:
        """A descriptor of directory ``path`` inside the folder open as ``top`` (not closed)."""
        fd = os.dup(top)
        done: list[str] = []
        for part in path.split("/") if path else []:
            done.append(part)
            fd = self._step(fd, part, create=create, own=True, shown="/".join(done))
        return fd

    def entry(self, top: int, path: str) -> Entry:
        parent, name = _split(path)
        fd = self.walk(top, parent)
        try:
            st = _lstat(fd, name, path)
        finally:
            os.close(fd)
        return _entry(path, st)

    def listing(self, top: int, path: str, limit: int) -> tuple[list[Entry], bool]:
        fd = self.walk(top, path)
        try:
            entries: list[Entry] = []
            with os.scandir(fd) as found:
                for item in found:
                    if len(entries) >= limit:
                        return sorted(entries, key=lambda e: e.path), True
                    st = item.stat(follow_symlinks=False)
                    full = f"{path}/{item.name}" if path else item.name
                    entries.append(_entry(full, st))
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e.path), False

    def open_file(self, top: int, path: str) -> tuple[int, int]:
        """A descriptor of regular file ``path`` and its size; links and devices refused."""
        parent, name = _split(path)
        fd = self.walk(top, parent)
        try:
            try:
                # O_NONBLOCK: opening a pipe must not hang; it is refused just below anyway
                file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                  | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                raise NotFound(f"no file {path} in this folder", field="path") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _link(path) from None
                raise
        finally:
            os.close(fd)
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(file_fd)
            if stat.S_ISDIR(st.st_mode):
                raise InvalidRequest(f"{path} is a directory: download it as an archive",
                                     field="path", code="is_a_directory")
            raise _special(path)
        return file_fd, st.st_size

    def remove(self, top: int, path: str) -> None:
        parent, name = _split(path)
        fd = self.walk(top, parent)
        try:
            st = _lstat(fd, name, path)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=fd)  # descriptor-based: never follows a link
            else:
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    def make_dirs(self, top: int, path: str) -> Entry:
        os.close(self.walk(top, path, create=True))
        return self.entry(top, path)

    # ------------------------------------------------------------ uploads

    def partial_name(self, folder_id: str, user_id: str, path: str) -> str:
        key = f"{folder_id}\0{user_id}\0{path}".encode("utf-8", "surrogateescape")
        return hashlib.sha256(key).hexdigest() + ".part"  # a path may hold bytes not UTF-8

    def uploads_fd(self) -> int:
        return self._step(self._root_fd(), UPLOADS, create=True, mode=PRIVATE_MODE,
                          shown=UPLOADS)

    def purge_uploads(self, older_than: float) -> int:
        """Delete partial uploads and archive staging left untouched for ``older_than``
        seconds (a client that never resumed, a manager stopped mid-archive)."""
        fd = self.uploads_fd()
        cutoff, purged = time.time() - older_than, 0
        try:
            with os.scandir(fd) as found:
                stale = [e.name for e in found
                         if e.stat(follow_symlinks=False).st_mtime < cutoff]
            for name in stale:
                if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
                else:
                    os.unlink(name, dir_fd=fd)
                purged += 1
        finally:
            os.close(fd)
        return purged

    def drop_partial(self, name: str, unless_since: float) -> bool:
        """Delete partial upload ``name`` unless it was written at or after ``unless_since``
        (a time stamp): whether it is gone (True also when there was none)."""
        if not name.endswith(".part"):
            return True  # an archive's reservation: its staging goes by ``purge_uploads``
        fd = self.uploads_fd()
        try:
            if os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime >= unless_since:
                return False
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
        return True

    def partial_size(self, name: str) -> int:
        fd = self.uploads_fd()
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0
        finally:
            os.close(fd)

    def open_partial(self, name: str, offset: int) -> int:
        """The partial upload, locked and positioned at ``offset`` (0: started afresh). 409
        ``upload_busy`` while another request sends it, ``upload_offset`` when the manager
        holds another amount than ``offset``."""
        fd = self.uploads_fd()
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            part = os.open(name, flags, 0o600, dir_fd=fd)
        finally:
            os.close(fd)
        try:  # held while this request writes; gone with the descriptor
            fcntl.flock(part, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(part)
            raise Conflict("this file is being uploaded by another request: wait for it, "
                           "or resume once it stops", code="upload_busy") from None
        if offset == 0:
            os.ftruncate(part, 0)
        held = os.fstat(part).st_size
        if held != offset:
            os.close(part)
            raise Conflict(
                f"the manager holds {held} bytes of this upload, not {offset}: resume from "
                f"offset {held}", field="offset", code="upload_offset",
            )
        os.lseek(part, offset, os.SEEK_SET)
        return part

    def place(self, top: int, path: str, source_dir: int, source: str) -> Entry:
        """Move a finished file (``source`` in ``source_dir``) to ``path``, replacing a file
        there; its parents are made as needed. The move is atomic: readers see the old or the
        new file, never part of one."""
        parent, name = _split(path)
        fd = self.walk(top, parent, create=True)
        try:
            try:
                existing = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise InvalidRequest(f"{path} is a directory; a file cannot replace it",
                                     field="path", code="is_a_directory")
            try:
                os.rename(source, name, src_dir_fd=source_dir, dst_dir_fd=fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_across(source_dir, source, fd, name)  # another filesystem (a mount)
        finally:
            os.close(fd)
        return self.entry(top, path)

    # ------------------------------------------------------------ helpers

    def own_fd(self, fd: int, mode: int) -> None:
        """Give what ``fd`` is open on to the folders' owner. Always through the descriptor:
        a path could have been swapped for a link since it was made."""
        if self._chown:
            os.fchown(fd, self.uid, self.gid)
        os.fchmod(fd, mode)

    def _root_fd(self) -> int:
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _step(self, fd: int, part: str, *, create: bool, shown: str, mode: int = DIR_MODE,
              own: bool = False) -> int:
        """Open directory ``part`` under ``fd`` (closing ``fd``), never through a link."""
        try:
            try:
                return os.open(part, _OPEN_DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise NotFound(f"no directory {shown} in this folder", field="path") from None
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                    made = True
                except FileExistsError:
                    made = False  # made meanwhile by someone else: open it below
                opened = os.open(part, _OPEN_DIR, dir_fd=fd)
                if made:
                    if own:
                        self.own_fd(opened, mode)
                    else:
                        os.fchmod(opened, mode)  # mkdir's mode is cut by the umask
                return opened
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        raise _link(shown) from None
                    raise InvalidRequest(f"{shown} is a file, not a directory", field="path",
                                         code="not_a_directory") from None
                raise
        finally:
            os.close(fd)


def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent, name


def _lstat(fd: int, name: str, path: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        raise NotFound(f"no file or directory {path} in this folder", field="path") from None


def _entry(path: str, st: os.stat_result) -> Entry:
    mode = st.st_mode
    kind = ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
            else "link" if stat.S_ISLNK(mode) else "other")
    return Entry(path, kind, st.st_size if kind == "file" else 0,
                 datetime.fromtimestamp(st.st_mtime, UTC))


def _link(path: str) -> InvalidRequest:
    return InvalidRequest(
        f"{path} is a symbolic link: links are never followed (they could point outside the "
        "folder)", field="path", code="path_not_allowed",
    )


def _special(path: str) -> InvalidRequest:
    return InvalidRequest(
        f"{path} is not a regular file: device files, pipes and sockets are not served",
        field="path", code="path_not_allowed",
    )


def may_chown() -> bool:
    """Whether this process may give files away: root, or a manager holding ``CAP_CHOWN``
    without root (the unit `gpuslice service install manager` writes grants it)."""
    if os.geteuid() == 0:
        return True
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    effective = next((line.split()[1] for line in status.splitlines()
                      if line.startswith("CapEff:")), "0")
    return bool(int(effective, 16) & (1 << _CAP_CHOWN))


_CAP_CHOWN = 0  # linux/capability.h


def _copy_across(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    tmp = f".{dst}.gpuslice-partial"
    with (
        open(os.open(src, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src_dir), "rb") as inp,
        open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE,
                     dir_fd=dst_dir), "wb") as out,
    ):
        shutil.copyfileobj(inp, out, 4 * 1024 * 1024)
        os.fchmod(out.fileno(), FILE_MODE)
        os.fchown(out.fileno(), *_ids(inp.fileno()))
    os.rename(tmp, dst, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
    os.unlink(src, dir_fd=src_dir)


def _ids(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_uid, st.st_gid

