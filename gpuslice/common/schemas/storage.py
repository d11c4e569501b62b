"""Storage folders: per-user folders, admins' shared folders (datasets), grants, files, usage.

A folder is mounted into sessions at ``/home/work/<name>``; names are one path component.
Paths inside a folder are relative POSIX paths (``data/train.csv``), checked by
``common.storage_paths`` on every side: no ``..``, no absolute paths, no empty parts.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from gpuslice.common.text import Line

#: One path component: letters, digits, ``._-``; a leading dot makes a dot-folder, which is
#: mounted in every session of its owner and is never shared.
FOLDER_NAME_RE = re.compile(r"^\.?[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FOLDER_NAME_RULE = (
    "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (or one dot and "
    "then one, for a dot-folder)"
)
#: How a session asks for a folder: ``NAME`` (read-write where allowed) or ``NAME:ro``/``:rw``.
FOLDER_REQUEST_RE = re.compile(r"^(?P<ref>[^:\s]{1,80})(?::(?P<mode>ro|rw))?$")
MAX_SESSION_FOLDERS = 32


def check_folder_name(value: str) -> str:
    if value in (".", "..") or not FOLDER_NAME_RE.match(value):
        raise ValueError(f"folder name {value!r}: use {FOLDER_NAME_RULE}")
    return value


FolderName = Annotated[str, AfterValidator(check_folder_name)]


class Permission(StrEnum):
    RO = "ro"
    RW = "rw"


class FolderCreate(BaseModel):
    """A new folder: the caller's own, or (admins) a shared one, e.g. a dataset."""

    name: FolderName = Field(
        description=f"Its name in sessions: /home/work/<name>; {FOLDER_NAME_RULE}."
    )
    shared: bool = Field(
        default=False, description="Admins: a shared folder, granted to users read-only or "
        "read-write (dot-folders cannot be shared)."
    )
    project: Line | None = Field(
        default=None, max_length=80, description="Admins: a folder of this project, which "
        "its members see and mount read-write (a shared folder; nobody else learns of it)."
    )


class FolderUpdate(BaseModel):
    """Rename a folder (it is mounted under its new name from the next session on)."""

    name: FolderName


class FolderGrantCreate(BaseModel):
    """Share a folder with a user, read-only or read-write."""

    user: str = Field(min_length=1, max_length=64,
                      description="A username (admins: or a user id).")
    permission: Permission = Permission.RO


class FolderGrantPublic(BaseModel):
    user_id: str | None = Field(default=None, description="Shown to admins only: to a user it "
                                "would tell which usernames exist.")
    username: str
    permission: Permission
    created_at: datetime


class FolderPublic(BaseModel):
    """A folder the caller may use, with its measured size."""

    id: str
    name: str
    owner_id: str | None = Field(description="Its owner; null for a shared folder.")
    owner: str = Field(description="The owner's username, or `shared`.")
    shared: bool
    project: str | None = Field(default=None, description="The project whose folder it is.")
    access: Literal["owner", "rw", "ro"] = Field(
        description="What the caller may do: everything (`owner`, and admins on shared "
        "folders), read and write files (`rw`), or read them (`ro`)."
    )
    auto_mount: bool = Field(description="A dot-folder: mounted in every session of its owner.")
    size: int | None = Field(description="Bytes of its files when last measured (null: not yet).")
    files: int | None = Field(description="Files when last measured.")
    measured_at: datetime | None
    created_at: datetime
    grants: list[FolderGrantPublic] | None = Field(
        default=None, description="Who it is shared with (for those who manage it)."
    )


class FileEntry(BaseModel):
    """One entry of a folder: a file or a directory (symbolic links are never followed)."""

    path: str = Field(description="Relative to the folder; bytes that are not UTF-8 (a name a "
                      "session wrote) are shown as U+FFFD: use `raw_path` to name such a one.")
    raw_path: str | None = Field(default=None, description="Only for a path that is not UTF-8: "
                                 "its bytes percent-encoded, accepted back as `raw_path`.")
    type: Literal["file", "dir", "link", "other"]
    size: int = Field(description="Bytes (files); 0 otherwise.")
    modified_at: datetime


class FolderListing(BaseModel):
    folder_id: str
    path: str = Field(description="The directory listed, relative to the folder ('' = top).")
    raw_path: str | None = Field(default=None, description="Its bytes percent-encoded, when "
                                 "they are not UTF-8.")
    entries: list[FileEntry]
    truncated: bool = Field(default=False, description="More entries than the limit.")


class UploadState(BaseModel):
    """How much of a file's upload the manager holds: resume from ``offset``."""

    path: str
    offset: int = Field(description="Bytes received so far of an unfinished upload (0: none).")


class StorageUsage(BaseModel):
    """A user's storage: the sum of their own folders (dot-folders included)."""

    user_id: str
    username: str
    used: int = Field(description="Bytes, as last measured plus uploads since, unfinished "
                      "uploads included.")
    uploading: int = Field(default=0, description="Bytes of `used` that unfinished uploads "
                           "hold (their whole size, until they finish or expire after a day).")
    quota: int | None = Field(description="Bytes the policy allows (null: no limit).")
    over_quota: bool = Field(description="Uploads are refused; sessions writing more are "
                             "reported in the manager's log.")
    folders: int
    measured_at: datetime | None


class SessionFolder(BaseModel):
    """A folder a session mounts at ``/home/work/<name>``."""

    folder_id: str
    name: str
    read_only: bool


def parse_folder_request(value: str) -> tuple[str, Permission | None]:
    """``data`` → (``data``, None), ``results:ro`` → (``results``, RO); ValueError otherwise."""
    match = FOLDER_REQUEST_RE.match(value)
    if not match:
        raise ValueError(
            f"folder {value!r}: write NAME, NAME:ro or NAME:rw (NAME: a folder's name or id)"
        )
    mode = match["mode"]
    return match["ref"], Permission(mode) if mode else None


class ArchiveUploaded(BaseModel):
    """What a directory upload (a tar stream) added to a folder."""

    path: str = Field(description="The directory it was unpacked into ('' = the folder's top).")
    files: int
    dirs: int
    bytes: int
