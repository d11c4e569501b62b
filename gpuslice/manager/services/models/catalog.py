"""Models: the index in the database (``models`` rows) over the store's bytes.

Invariants:
- **Per-user prefixes.** Every key is made here by ``key_of`` from the owner's id (the
  caller's, or for a session its owner's), a checked name, a version the manager chose and a
  checked relative path; nothing a caller sends becomes a key otherwise. Every query is
  filtered by the owner: another user's model is a 404 like a name nobody used.
- **A save is all or nothing.** An upload is an ``uploading`` row with its file list; it
  becomes ``ready`` only when every file is in the store with its announced size.
  Uploads never completed are deleted after ``model_store.upload_timeout``.
- **Nothing is replaced.** A ready save takes the next version number of its name (1, 2, …;
  a unique index settles two completing at once); a bare name means the latest version,
  ``name:N`` version N. A deleted version's number is never given again (its row stays,
  ``deleted``, without files). Deleting a bare name of several versions is refused unless
  every version is asked for.
- **Room first.** An upload announcing more than the owner's quota or the store's free
  space is refused before a byte is sent (``quota.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.models import (
    ModelDeleted,
    ModelDetail,
    ModelFile,
    ModelPublic,
    ModelUploadStart,
    ModelUploadStarted,
    ModelUrls,
    split_ref,
)
from gpuslice.common.storage_paths import PathRuleError, clean_path
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import ModelRow, SessionRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound, TooLarge, Unavailable
from gpuslice.manager.services.models.quota import check_room
from gpuslice.manager.services.models.store import Chunks, ModelStore, SizeMismatch, StoreError

log = logging.getLogger(__name__)
# ``deleted``: a version deleted, kept as a row so that its number is never given again
UPLOADING, READY, DELETED = "uploading", "ready", "deleted"
NUMBER_TRIES = 5  # completes of one name racing for its next number
T = TypeVar("T")


def key_of(owner_id: str, name: str, version: str, path: str = "") -> str:
    return f"users/{owner_id}/{name}/{version}/{path}"


async def start_upload(
    db: AsyncSession, store: ModelStore, owner_id: str, body: ModelUploadStart, *,
    quota: int, session_id: str | None = None, presign_ttl: int | None = None,
    base_url: str = "",
) -> ModelUploadStarted:
    """Record a new save of ``body.name`` (within the owner's ``quota`` and the store's free
    space); with ``presign_ttl`` and a store that takes uploads directly (S3), one PUT URL per
    file, good for one PUT of exactly the file's announced size."""
    paths = [f.path for f in body.files]
    if len(set(paths)) != len(paths):
        raise InvalidRequest("a file is listed twice", field="files")
    size = sum(f.size for f in body.files)
    await check_room(db, store, owner_id, size, quota)
    row = ModelRow(
        id=new_id(), owner_id=owner_id, name=body.name, version=new_id(), status=UPLOADING,
        size=size, files=len(body.files),
        file_list=[f.model_dump() for f in body.files], session_id=session_id,
    )
    db.add(row)
    await db.commit()
    try:  # again with the row in: of two uploads racing, at most one fits
        await check_room(db, store, owner_id, size, quota, counted=True)
    except TooLarge:
        await db.delete(row)
        await db.commit()
        raise
    if presign_ttl is None or not store.direct_uploads:
        return ModelUploadStarted(upload_id=row.id, name=row.name, mode="stream")
    try:  # each URL writes its file once, at its announced size (s3.py)
        urls = {f.path: store.presign_put(_key(row, f.path), f.size, presign_ttl)
                for f in body.files}
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None
    return ModelUploadStarted(upload_id=row.id, name=row.name, mode="presigned", urls=urls,
                              headers=dict(store.put_headers),
                              expires_at=utcnow() + timedelta(seconds=presign_ttl))


async def put_file(
    db: AsyncSession, store: ModelStore, owner_id: str, upload_id: str, path: str,
    body: AsyncIterator[bytes],
) -> None:
    """Store one announced file of an upload (streamed); 422 if its length is not the one
    announced."""
    row = await _upload(db, owner_id, upload_id)
    path = _path(path)
    size = _announced(row, path)
    await db.commit()
    try:
        await store.put(_key(row, path), body, size)
    except SizeMismatch as err:
        raise InvalidRequest(f"file {path}: {err}", field="path",
                             code="upload_size_mismatch") from None
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None


async def complete(
    db: AsyncSession, store: ModelStore, owner_id: str, upload_id: str
) -> ModelPublic:
    """Check every file is in the store, then make the save the next version of its name."""
    row = await _upload(db, owner_id, upload_id)
    await db.commit()
    for item in row.file_list:
        held = await _store(store.size(_key(row, item["path"])))
        if held != item["size"]:
            got = "is missing" if held is None else f"has {held} of {item['size']} bytes"
            raise InvalidRequest(f"file {item['path']} {got}: send it, then complete again",
                                 code="upload_incomplete")
    for _ in range(NUMBER_TRIES):
        row = await _upload(db, owner_id, upload_id)
        row.number = await _last_number(db, owner_id, row.name) + 1
        row.status, row.completed_at = READY, utcnow()
        try:
            await db.commit()
        except IntegrityError:  # another save of the name took that number first
            await db.rollback()
            continue
        return await public(db, row, latest=True)
    raise Unavailable(f"model {row.name}: too many saves of it at once; complete again",
                      code="model_busy")


async def list_models(
    db: AsyncSession, owner_id: str, name: str | None = None
) -> list[ModelPublic]:
    """Every version of the owner's models (of ``name`` only, if given), by name and
    version."""
    stmt = select(ModelRow).where(ModelRow.owner_id == owner_id, ModelRow.status == READY)
    if name is not None:
        stmt = stmt.where(ModelRow.name == name)
    rows = (await db.scalars(stmt.order_by(ModelRow.name, ModelRow.number))).all()
    last = {row.name: row.number for row in rows}  # ordered: the last seen is the newest
    return [await public(db, row, latest=row.number == last[row.name]) for row in rows]


async def get_model(db: AsyncSession, owner_id: str, ref: str) -> ModelRow:
    """The owner's model ``ref`` (``name``: its latest version; ``name:N``: version N); 404
    otherwise, whoever else has one of that name."""
    name, number = _ref(ref)
    stmt = select(ModelRow).where(
        ModelRow.owner_id == owner_id, ModelRow.name == name, ModelRow.status == READY)
    if number is None:
        stmt = stmt.order_by(ModelRow.number.desc()).limit(1)
    else:
        stmt = stmt.where(ModelRow.number == number)
    row = await db.scalar(stmt)
    if row is None and number is not None:
        held = await _numbers(db, owner_id, name)
        await db.commit()
        if held:
            raise NotFound(f"model {name} has no version {number}; its versions: "
                           f"{_listed(held)}", field="name")
    await db.commit()
    if row is None:
        raise NotFound(f"no model named {name}", field="name")
    return row


async def detail(db: AsyncSession, owner_id: str, ref: str) -> ModelDetail:
    row = await get_model(db, owner_id, ref)
    files = [ModelFile(**f) for f in row.file_list]
    return ModelDetail(**(await public(db, row)).model_dump(), file_list=files)


async def delete_model(
    db: AsyncSession, store: ModelStore, owner_id: str, ref: str, *, every: bool = False
) -> ModelDeleted:
    """Delete version N of ``name:N``; for a bare name its only version, or with ``every``
    all of them (409 ``model_has_versions`` otherwise: never all of them silently)."""
    name, number = _ref(ref)
    if number is not None:
        if every:
            raise InvalidRequest(f"all=true deletes every version of a name: give {name}, "
                                 f"not {ref}", field="all")
        rows: Sequence[ModelRow] = [await get_model(db, owner_id, ref)]
    else:
        rows = (await db.scalars(select(ModelRow).where(
            ModelRow.owner_id == owner_id, ModelRow.name == name, ModelRow.status == READY)
            .order_by(ModelRow.number))).all()
        await db.commit()
        if not rows:
            raise NotFound(f"no model named {name}", field="name")
        if len(rows) > 1 and not every:
            raise Conflict(
                f"model {name} has {len(rows)} versions ({_listed([r.number for r in rows])}):"
                f" delete one as {name}:VERSION, or every version with all=true (gpuslice "
                f"model delete {name} --all)", field="name", code="model_has_versions")
    for row in rows:
        row.status = DELETED
    await db.commit()
    for row in rows:
        await _drop(store, row)
    return ModelDeleted(name=name, versions=[row.number or 0 for row in rows])


async def open_file(
    db: AsyncSession, store: ModelStore, owner_id: str, ref: str, path: str
) -> tuple[Chunks, int]:
    row = await get_model(db, owner_id, ref)
    path = _path(path)
    _announced(row, path)
    try:
        return await _store(store.open(_key(row, path)))
    except KeyError:
        raise Unavailable(f"model {row.name}:{row.number}: file {path} is gone from the store",
                          code="model_store_error") from None


async def presign_get(
    db: AsyncSession, store: ModelStore, owner_id: str, ref: str, ttl: int, base_url: str
) -> ModelUrls:
    """Download URLs for every file of one of the owner's models, valid ``ttl`` seconds."""
    row = await get_model(db, owner_id, ref)
    urls = {f["path"]: _presign(store, "GET", _key(row, f["path"]), ttl, base_url)
            for f in row.file_list}
    return ModelUrls(name=row.name, version=row.number or 0, urls=urls,
                     expires_at=utcnow() + timedelta(seconds=ttl))


async def purge_stale(db: AsyncSession, store: ModelStore, older_than: float) -> int:
    """Delete uploads begun more than ``older_than`` seconds ago and never completed."""
    cutoff = utcnow() - timedelta(seconds=older_than)
    stale = (await db.scalars(select(ModelRow).where(
        ModelRow.status == UPLOADING, ModelRow.created_at < cutoff))).all()
    for row in stale:
        await db.delete(row)
    await db.commit()
    for row in stale:
        await _drop(store, row)
    return len(stale)


async def public(db: AsyncSession, row: ModelRow, latest: bool | None = None) -> ModelPublic:
    """A ready save as users see it (``latest``: whether it is the newest of its name; looked
    up when not given)."""
    session_name = None
    if row.session_id is not None:
        session_name = await db.scalar(select(SessionRow.name).where(
            SessionRow.id == row.session_id))
    if latest is None:
        latest = row.number == await _last_number(db, row.owner_id, row.name, ready=True)
    saved: datetime = row.completed_at or row.created_at
    number = row.number or 0
    return ModelPublic(id=row.id, name=row.name, version=number, ref=f"{row.name}:{number}",
                       latest=latest, owner_id=row.owner_id, size=row.size, files=row.files,
                       saved_at=saved, session_id=row.session_id, session_name=session_name)


# ------------------------------------------------------------------ helpers


async def _upload(db: AsyncSession, owner_id: str, upload_id: str) -> ModelRow:
    row = await db.scalar(select(ModelRow).where(
        ModelRow.id == upload_id, ModelRow.owner_id == owner_id, ModelRow.status == UPLOADING))
    if row is None:
        raise NotFound(f"no upload {upload_id} in progress", field="upload_id")
    return row


def _ref(ref: str) -> tuple[str, int | None]:
    try:
        return split_ref(ref)
    except ValueError as err:
        raise InvalidRequest(str(err), field="name", code="bad_model_ref") from None


async def _last_number(
    db: AsyncSession, owner_id: str, name: str, *, ready: bool = False
) -> int:
    """The highest version of ``name``: of those there are (``ready``), or ever given (with
    the deleted ones: the next save's number is above them)."""
    stmt = select(func.max(ModelRow.number)).where(
        ModelRow.owner_id == owner_id, ModelRow.name == name)
    if ready:
        stmt = stmt.where(ModelRow.status == READY)
    return int(await db.scalar(stmt) or 0)


async def _numbers(db: AsyncSession, owner_id: str, name: str) -> list[int]:
    return [int(n or 0) for n in await db.scalars(select(ModelRow.number).where(
        ModelRow.owner_id == owner_id, ModelRow.name == name, ModelRow.status == READY)
        .order_by(ModelRow.number))]


def _listed(numbers: Sequence[int | None]) -> str:
    return ", ".join(str(n) for n in numbers)


def _key(row: ModelRow, path: str) -> str:
    return key_of(row.owner_id, row.name, row.version, path)


def _path(path: str) -> str:
    try:
        return clean_path(path)
    except PathRuleError as err:
        raise InvalidRequest(str(err), field="path", code="path_not_allowed") from None


def _announced(row: ModelRow, path: str) -> int:
    for item in row.file_list:
        if item["path"] == path:
            return int(item["size"])
    raise NotFound(f"model {row.name} has no file {path}", field="path")


def _presign(store: ModelStore, method: str, key: str, ttl: int, base_url: str) -> str:
    try:
        return store.presign(method, key, ttl, base_url)
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None


async def _store(pending: Awaitable[T]) -> T:
    try:
        return await pending
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None


async def _drop(store: ModelStore, row: ModelRow) -> None:
    try:
        await store.delete_prefix(key_of(row.owner_id, row.name, row.version))
    except StoreError as err:  # the row is gone: its files are unreachable, only space is lost
        log.warning("model %s/%s:%s: deleting its files failed: %s", row.owner_id, row.name,
                    row.number, err)
