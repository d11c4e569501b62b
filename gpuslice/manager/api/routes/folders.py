"""Storage folders: create, list with usage, rename, delete, share; files in and out (streamed)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from gpuslice.common.schemas.storage import (
    ArchiveUploaded,
    FileEntry,
    FolderCreate,
    FolderGrantCreate,
    FolderGrantPublic,
    FolderListing,
    FolderPublic,
    FolderUpdate,
    StorageUsage,
    UploadState,
)
from gpuslice.manager.api.deps import (
    CurrentUser,
    DbDep,
    FolderAccess,
    SettingsDep,
    StorageDep,
)
from gpuslice.manager.services.storage import files, folders, grants, usage

router = APIRouter(prefix="/folders", tags=["folders"])
TextPath = Annotated[str | None, Query(max_length=4096, description="Relative to the folder.")]
RawPath = Annotated[str | None, Query(
    max_length=3 * 4096, description="Instead of `path`, for a name that is not UTF-8: its "
    "bytes percent-encoded, as listings give it (`raw_path`).")]


def _file_path(path: TextPath = None, raw_path: RawPath = None) -> str:
    return files.given_path(path, raw_path, default=None)


def _dir_path(path: TextPath = None, raw_path: RawPath = None) -> str:
    return files.given_path(path, raw_path, default="")


PathQuery = Annotated[str, Depends(_file_path)]  # a file or directory: `path` or `raw_path`
DirQuery = Annotated[str, Depends(_dir_path)]  # a directory, the top ('') when not given
STREAMED = {"x-gpuslice-streamed-body": True}  # the body is streamed, never read whole


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_folder(
    body: FolderCreate, db: DbDep, user: CurrentUser, storage: StorageDep
) -> FolderPublic:
    """Create a folder of one's own, or (admins, `shared`) a shared folder such as a dataset.
    It is mounted in sessions at /home/work/<name>; dot-folders in every session of the owner."""
    return await folders.create_folder(db, storage, user, body)


@router.get("")
async def list_folders(db: DbDep, user: CurrentUser) -> list[FolderPublic]:
    """One's folders, those shared with one (and admins: every shared folder), with sizes."""
    return await folders.list_folders(db, user)


@router.get("/usage")
async def storage_usage(
    db: DbDep, user: CurrentUser,
    of: Annotated[str | None, Query(alias="user", description="Admins: anyone's.")] = None,
) -> StorageUsage:
    """What one's own folders hold against one's storage quota."""
    target = user if of is None else await folders.find_user_for(db, user, of)
    return await usage.usage_of(db, target)


@router.get("/{folder_id}")
async def get_folder(access: FolderAccess, db: DbDep) -> FolderPublic:
    """One folder: size, access, and (for its managers) who it is shared with."""
    return await folders.describe(db, access.folder, access.level, admin=access.admin)


@router.patch("/{folder_id}")
async def rename_folder(access: FolderAccess, body: FolderUpdate, db: DbDep) -> FolderPublic:
    """Rename a folder (owners; admins for shared ones): new sessions mount the new name."""
    return await folders.rename_folder(db, access, body)


@router.delete("/{folder_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_folder(access: FolderAccess, db: DbDep, storage: StorageDep) -> None:
    """Delete a folder and all its files; 409 `folder_in_use` while a session mounts it."""
    await folders.delete_folder(db, storage, access)


@router.put("/{folder_id}/grants")
async def share_folder(
    access: FolderAccess, body: FolderGrantCreate, db: DbDep
) -> FolderGrantPublic:
    """Share a folder with a user by username, read-only or read-write (owners; admins for
    shared ones). The answer is the same whether such a user exists or not: a name nobody has
    is held and shared once that user exists. Dot-folders are never shared."""
    return await grants.share(db, access, body)


@router.delete("/{folder_id}/grants/{user}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_grant(access: FolderAccess, user: str, db: DbDep) -> None:
    """Stop sharing a folder with a user (sessions mounting it keep it until they end)."""
    await grants.revoke(db, access, user)


@router.get("/{folder_id}/files")
async def list_files(
    access: FolderAccess, storage: StorageDep, settings: SettingsDep, path: DirQuery
) -> FolderListing:
    """The entries of a directory of the folder (links are shown, never followed)."""
    return await files.listing(storage, access, path, settings.storage.max_listing)


@router.post("/{folder_id}/dirs", status_code=status.HTTP_201_CREATED)
async def make_dirs(access: FolderAccess, storage: StorageDep, path: PathQuery) -> FileEntry:
    """Create a directory (and its parents)."""
    return await files.make_dirs(storage, access, path)


@router.delete("/{folder_id}/files", status_code=status.HTTP_204_NO_CONTENT)
async def delete_file(access: FolderAccess, storage: StorageDep, path: PathQuery) -> None:
    """Delete a file, or a directory with everything in it."""
    await files.remove(storage, access, path)


@router.get("/{folder_id}/content", response_class=StreamingResponse)
async def download_file(
    access: FolderAccess, storage: StorageDep, path: PathQuery,
    range_: Annotated[str | None, Header(alias="Range")] = None,
) -> StreamingResponse:
    """A file's bytes, streamed; `Range: bytes=N-` resumes from byte N (206)."""
    start = _range_start(range_)
    got = await files.download(storage, access, path, start or 0)
    headers = {"Content-Length": str(got.size - got.start), "Accept-Ranges": "bytes"}
    if start is not None:
        headers["Content-Range"] = f"bytes {got.start}-{got.size - 1}/{got.size}"
    code = status.HTTP_206_PARTIAL_CONTENT if start is not None else status.HTTP_200_OK
    return StreamingResponse(got.chunks, code, headers, "application/octet-stream")


@router.put("/{folder_id}/content", status_code=status.HTTP_201_CREATED,
            openapi_extra=STREAMED)
async def upload_file(
    access: FolderAccess, request: Request, response: Response, db: DbDep, user: CurrentUser,
    storage: StorageDep, path: PathQuery,
    size: Annotated[int, Query(ge=0, le=2**50, description="The whole file's bytes.")],
    offset: Annotated[int, Query(ge=0, description="Where this body starts (resume).")] = 0,
) -> FileEntry | UploadState:
    """Upload a file (the raw body, streamed): bytes `offset`.. of a `size`-byte file. Once all
    are in the file appears at `path`, atomically (201); a body that ends early leaves the
    bytes held for a resume (202 with the offset to resume from), for a day. The whole `size`
    counts against the storage quota from the start: 422 `quota_exceeded`."""
    done = await files.upload_file(db, storage, access, user, path, size=size, offset=offset,
                                   body=request.stream())
    if isinstance(done, UploadState):
        response.status_code = status.HTTP_202_ACCEPTED
    return done


@router.get("/{folder_id}/uploads")
async def upload_state(
    access: FolderAccess, user: CurrentUser, storage: StorageDep, path: PathQuery
) -> UploadState:
    """How many bytes of one's unfinished upload of `path` the manager holds."""
    return await files.upload_state(storage, access, user, path)


@router.get("/{folder_id}/archive", response_class=StreamingResponse)
async def download_archive(
    access: FolderAccess, storage: StorageDep, path: DirQuery
) -> StreamingResponse:
    """A directory as a tar stream (files and directories; links and devices left out)."""
    chunks = files.download_archive(storage, access, path)
    return StreamingResponse(chunks, media_type="application/x-tar")


@router.put("/{folder_id}/archive", openapi_extra=STREAMED)
async def upload_archive(
    access: FolderAccess, request: Request, db: DbDep, user: CurrentUser, storage: StorageDep,
    settings: SettingsDep, path: DirQuery,
) -> ArchiveUploaded:
    """Unpack a tar (or tar.gz) stream into a directory, all or nothing: every entry must be a
    file or directory with a relative path inside the folder. 422 `quota_exceeded`."""
    return await files.upload_archive(db, storage, access, user, path, request.stream(),
                                      max_entries=settings.storage.max_archive_entries)


def _range_start(header: str | None) -> int | None:
    """The N of `bytes=N-` (the one form resuming needs); other forms get the whole file."""
    if not header or not header.startswith("bytes="):
        return None
    first, _, last = header[6:].partition("-")
    return int(first) if first.isdigit() and not last and "," not in header else None
