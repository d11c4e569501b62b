"""Serving the local store's presigned URLs (S3 serves its own): check, then stream."""

from __future__ import annotations

from starlette.requests import Request

from gpuslice.manager.errors import Forbidden, InvalidRequest, NotFound, Unavailable
from gpuslice.manager.services.models.local import LocalStore
from gpuslice.manager.services.models.store import (
    Chunks,
    ModelStore,
    SizeMismatch,
    StoreError,
)


async def open_signed(
    store: ModelStore, key: str, expires: int, signature: str
) -> tuple[Chunks, int]:
    local = _checked(store, "GET", key, expires, signature)
    try:
        return await local.open(key)
    except (KeyError, StoreError):
        raise NotFound("nothing is stored at this URL") from None


async def put_signed(
    store: ModelStore, key: str, expires: int, signature: str, request: Request
) -> None:
    local = _checked(store, "PUT", key, expires, signature)
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise InvalidRequest("send Content-Length: the store needs the object's size",
                             code="length_required")
    try:
        await local.put(key, request.stream(), int(length))
    except SizeMismatch as err:
        raise InvalidRequest(f"model store: {err}", code="upload_size_mismatch") from None
    except StoreError as err:
        raise Unavailable(f"model store: {err}", code="model_store_error") from None


def _checked(
    store: ModelStore, method: str, key: str, expires: int, signature: str
) -> LocalStore:
    if not isinstance(store, LocalStore):
        raise NotFound("this manager's model store is S3: its URLs point there")
    refused = store.check(method, key, expires, signature)
    if refused is not None:
        raise Forbidden(refused, code="url_refused")
    return store
