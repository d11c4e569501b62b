"""The model store for users: list, show, download (streamed or presigned), delete, upload."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse

from gpuslice.common.schemas.models import (
    MAX_PRESIGN_TTL,
    ModelDetail,
    ModelPublic,
    ModelUploadStart,
    ModelUploadStarted,
    ModelUrls,
)
from gpuslice.manager.api.deps import CurrentUser, DbDep, ModelStoreDep
from gpuslice.manager.services.models import catalog

router = APIRouter(tags=["models"])
STREAMED = {"x-gpuslice-streamed-body": True}  # the body is streamed, never read whole
PathQuery = Annotated[str, Query(max_length=4096, description="A file of the model.")]


@router.get("/models")
async def list_models(db: DbDep, user: CurrentUser) -> list[ModelPublic]:
    """One's saved models (every user sees only their own)."""
    return await catalog.list_models(db, user.id)


@router.get("/models/{name}")
async def get_model(name: str, db: DbDep, user: CurrentUser) -> ModelDetail:
    """One of one's models with its files."""
    return await catalog.detail(db, user.id, name)


@router.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_model(name: str, db: DbDep, user: CurrentUser, store: ModelStoreDep) -> None:
    """Delete one of one's models and its files."""
    await catalog.delete_model(db, store, user.id, name)


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
    body: ModelUploadStart, db: DbDep, user: CurrentUser, store: ModelStoreDep
) -> ModelUploadStarted:
    """Begin saving a model under one's name: list its files, send each (`PUT …/files`), then
    complete; a save of an existing name replaces it once complete."""
    return await catalog.start_upload(db, store, user.id, body)


@router.put("/model-uploads/{upload_id}/files", status_code=status.HTTP_204_NO_CONTENT,
            openapi_extra=STREAMED)
async def upload_file(
    upload_id: str, path: PathQuery, request: Request, db: DbDep, user: CurrentUser,
    store: ModelStoreDep,
) -> None:
    """One announced file of an upload: the raw body, streamed to the store."""
    await catalog.put_file(db, store, user.id, upload_id, path, request.stream())


@router.post("/model-uploads/{upload_id}/complete")
async def complete_upload(
    upload_id: str, db: DbDep, user: CurrentUser, store: ModelStoreDep
) -> ModelPublic:
    """Check that every file arrived and make the model available (422 `upload_incomplete`
    naming a missing file otherwise)."""
    return await catalog.complete(db, store, user.id, upload_id)
