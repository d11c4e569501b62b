"""The model store for users: list, show, download (streamed or presigned), delete, upload.
A model is named ``NAME`` (its latest version) or ``NAME:VERSION`` in every path."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse

from gpuslice.common.schemas.models import (
    MAX_PRESIGN_TTL,
    ModelDeleted,
    ModelDetail,
    ModelPublic,
    ModelUploadStart,
    ModelUploadStarted,
    ModelUrls,
)
from gpuslice.manager.api.deps import CurrentUser, DbDep, ModelStoreDep, SettingsDep
from gpuslice.manager.services.models import catalog

router = APIRouter(tags=["models"])
STREAMED = {"x-gpuslice-streamed-body": True}  # the body is streamed, never read whole
PathQuery = Annotated[str, Query(max_length=4096, description="A file of the model.")]
NameQuery = Annotated[str | None, Query(max_length=128, description="Only this name's versions.")]


@router.get("/models")
async def list_models(db: DbDep, user: CurrentUser, name: NameQuery = None) -> list[ModelPublic]:
    """One's saved models, every version of each (every user sees only their own)."""
    return await catalog.list_models(db, user.id, name)


@router.get("/models/{name}")
async def get_model(name: str, db: DbDep, user: CurrentUser) -> ModelDetail:
    """One of one's models with its files: `NAME` (its latest version) or `NAME:VERSION`."""
    return await catalog.detail(db, user.id, name)


@router.delete("/models/{name}")
async def delete_model(
    name: str, db: DbDep, user: CurrentUser, store: ModelStoreDep,
    every: Annotated[bool, Query(alias="all", description="Every version of NAME.")] = False,
) -> ModelDeleted:
    """Delete `NAME:VERSION`, or `NAME` when it has one version (409 `model_has_versions`
    when it has more, unless `all=true`: then every version), with its files; a deleted
    version's number is not given again."""
    return await catalog.delete_model(db, store, user.id, name, every=every)


@router.get("/models/{name}/files", response_class=StreamingResponse)
async def download_file(
    name: str, path: PathQuery, db: DbDep, user: CurrentUser, store: ModelStoreDep
) -> StreamingResponse:
    """One file of one's model, streamed from the store."""
    chunks, size = await catalog.open_file(db, store, user.id, name, path)
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})


@router.post("/models/{name}/presign")
async def presign(
    name: str, request: Request, db: DbDep, user: CurrentUser, store: ModelStoreDep,
    ttl: Annotated[int, Query(ge=1, le=MAX_PRESIGN_TTL, description="Seconds.")] = 300,
) -> ModelUrls:
    """Short-lived download URLs for the files of one of one's models: whoever holds one may
    fetch that file, and only that file, until it expires."""
    return await catalog.presign_get(db, store, user.id, name, ttl, str(request.base_url))


@router.post("/model-uploads", status_code=status.HTTP_201_CREATED)
async def start_upload(
    body: ModelUploadStart, db: DbDep, user: CurrentUser, store: ModelStoreDep,
    settings: SettingsDep,
) -> ModelUploadStarted:
    """Begin saving a model under one's name: list its files, send each (`PUT …/files`), then
    complete; a save of an existing name becomes its next version. 413 when the files
    announced exceed one's `model_store.user_quota` or the store's free space."""
    return await catalog.start_upload(db, store, user.id, body,
                                      quota=settings.model_store.user_quota)


@router.put("/model-uploads/{upload_id}/files", status_code=status.HTTP_204_NO_CONTENT,
            openapi_extra=STREAMED)
async def upload_file(
    upload_id: str, path: PathQuery, request: Request, db: DbDep, user: CurrentUser,
    store: ModelStoreDep,
) -> None:
    """One announced file of an upload: the raw body, streamed to the store (422
    `upload_size_mismatch` when it is not the size announced)."""
    await catalog.put_file(db, store, user.id, upload_id, path, request.stream())


@router.post("/model-uploads/{upload_id}/complete")
async def complete_upload(
    upload_id: str, db: DbDep, user: CurrentUser, store: ModelStoreDep
) -> ModelPublic:
    """Check that every file arrived and make the save the next version of its name (422
    `upload_incomplete` naming a missing file otherwise)."""
    return await catalog.complete(db, store, user.id, upload_id)
