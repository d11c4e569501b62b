"""Models: the index in the database (``models`` rows) over the store's bytes.

Invariants:
- **Per-user prefixes.** Every key is made here by ``key_of`` from the owner's id (the
  caller's, or for a session its owner's), a checked name, a version the manager chose and a
  checked relative path; nothing a caller sends becomes a key otherwise. Every query is
  filtered by the owner: another user's model is a 404 like a name nobody used.
- **A save is all or nothing.** An upload is an ``uploading`` row with its file list; it
  becomes ``ready`` only when every file is in the store with its announced size. A ready
  save replaces the older save of the name (its files are deleted after the commit).
  Uploads never completed are deleted after ``model_store.upload_timeout``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.models import (
    ModelDetail,
    ModelFile,
    ModelPublic,
    ModelUploadStart,
    ModelUploadStarted,
    ModelUrls,
)
from gpuslice.common.storage_paths import PathRuleError, clean_path
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import ModelRow, SessionRow
from gpuslice.manager.errors import InvalidRequest, NotFound, Unavailable
from gpuslice.manager.services.models.store import Chunks, ModelStore, StoreError

log = logging.getLogger(__name__)
UPLOADING, READY = "uploading", "ready"
T = TypeVar("T")


def key_of(owner_id: str, name: str, version: str, path: str = "") -> str:
    return f"users/{owner_id}/{name}/{version}/{path}"


async def start_upload(
    db: AsyncSession, store: ModelStore, owner_id: str, body: ModelUploadStart, *,
    session_id: str | None = None, presign_ttl: int | None = None, base_url: str = "",
) -> ModelUploadStarted:
    """Record a new save of ``body.name``; with ``presign_ttl`` and a store that takes
    uploads directly (S3), one PUT URL per file."""
    paths = [f.path for f in body.files]
    if len(set(paths)) != len(paths):
        raise InvalidRequest("a file is listed twice", field="files")
    row = ModelRow(
        id=new_id(), owner_id=owner_id, name=body.name, version=new_id(), status=UPLOADING,
        size=sum(f.size for f in body.files), files=len(body.files),
        file_list=[f.model_dump() for f in body.files], session_id=session_id,
    )
    db.add(row)
    await db.commit()
    if presign_ttl is None or not store.direct_uploads:
        return ModelUploadStarted(upload_id=row.id, name=row.name, mode="stream")
    urls = {p: _presign(store, "PUT", _key(row, p), presign_ttl, base_url) for p in paths}
    return ModelUploadStarted(upload_id=row.id, name=row.name, mode="presigned", urls=urls,
                              expires_at=utcnow() + timedelta(seconds=presign_ttl))


async def put_file(
    db: AsyncSession, store: ModelStore, owner_id: str, upload_id: str, path: str,
    body: AsyncIterator[bytes],
) -> None:
    """Store one announced file of an upload (streamed)."""
    row = await _upload(db, owner_id, upload_id)
    path = _path(path)
    size = _announced(row, path)
    try:
        await store.put(_key(row, path), body, size)
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None


async def complete(
    db: AsyncSession, store: ModelStore, owner_id: str, upload_id: str
) -> ModelPublic:
    """Check every file is in the store, make the save ready, replace the older one."""
    row = await _upload(db, owner_id, upload_id)
    await db.commit()
    for item in row.file_list:
        held = await _store(store.size(_key(row, item["path"])))
        if held != item["size"]:
            got = "is missing" if held is None else f"has {held} of {item['size']} bytes"
            raise InvalidRequest(f"file {item['path']} {got}: send it, then complete again",
                                 code="upload_incomplete")
    older = (await db.scalars(select(ModelRow).where(
        ModelRow.owner_id == owner_id, ModelRow.name == row.name, ModelRow.status == READY,
        ModelRow.id != row.id))).all()
    row = await _upload(db, owner_id, upload_id)
    row.status, row.completed_at = READY, utcnow()
    for old in older:
        await db.delete(old)
    await db.commit()
    for old in older:
        await _drop(store, old)
    return await public(db, row)


async def list_models(db: AsyncSession, owner_id: str) -> list[ModelPublic]:
    rows = (await db.scalars(select(ModelRow).where(
        ModelRow.owner_id == owner_id, ModelRow.status == READY).order_by(ModelRow.name))).all()
    return [await public(db, row) for row in rows]


async def get_model(db: AsyncSession, owner_id: str, name: str) -> ModelRow:
    """The owner's model ``name``; 404 otherwise, whoever else has one of that name."""
    row = await db.scalar(select(ModelRow).where(
        ModelRow.owner_id == owner_id, ModelRow.name == name, ModelRow.status == READY))
    await db.commit()
    if row is None:
        raise NotFound(f"no model named {name}", field="name")
    return row


async def detail(db: AsyncSession, owner_id: str, name: str) -> ModelDetail:
    row = await get_model(db, owner_id, name)
    files = [ModelFile(**f) for f in row.file_list]
    return ModelDetail(**(await public(db, row)).model_dump(), file_list=files)


async def delete_model(db: AsyncSession, store: ModelStore, owner_id: str, name: str) -> None:
    row = await get_model(db, owner_id, name)
    await db.delete(row)
    await db.commit()
    await _drop(store, row)


async def open_file(
    db: AsyncSession, store: ModelStore, owner_id: str, name: str, path: str
) -> tuple[Chunks, int]:
    row = await get_model(db, owner_id, name)
    path = _path(path)
    _announced(row, path)
    try:
        return await _store(store.open(_key(row, path)))
    except KeyError:
        raise Unavailable(f"model {name}: file {path} is gone from the store",
                          code="model_store_error") from None


async def presign_get(
    db: AsyncSession, store: ModelStore, owner_id: str, name: str, ttl: int, base_url: str
) -> ModelUrls:
    """Download URLs for every file of one of the owner's models, valid ``ttl`` seconds."""
    row = await get_model(db, owner_id, name)
    urls = {f["path"]: _presign(store, "GET", _key(row, f["path"]), ttl, base_url)
            for f in row.file_list}
    return ModelUrls(name=name, urls=urls, expires_at=utcnow() + timedelta(seconds=ttl))


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


async def public(db: AsyncSession, row: ModelRow) -> ModelPublic:
    session_name = None
    if row.session_id is not None:
        session_name = await db.scalar(select(SessionRow.name).where(
            SessionRow.id == row.session_id))
    saved: datetime = row.completed_at or row.created_at
    return ModelPublic(id=row.id, name=row.name, owner_id=row.owner_id, size=row.size,
                       files=row.files, saved_at=saved, session_id=row.session_id,
                       session_name=session_name)


# ------------------------------------------------------------------ helpers


async def _upload(db: AsyncSession, owner_id: str, upload_id: str) -> ModelRow:
    row = await db.scalar(select(ModelRow).where(
        ModelRow.id == upload_id, ModelRow.owner_id == owner_id, ModelRow.status == UPLOADING))
    if row is None:
        raise NotFound(f"no upload {upload_id} in progress", field="upload_id")
    return row


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
        log.warning("model %s/%s: deleting its files failed: %s", row.owner_id, row.name, err)
