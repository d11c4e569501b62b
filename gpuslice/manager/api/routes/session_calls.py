"""Calls a node's agent relays from inside one of its sessions (the in-session endpoint).

Authenticated as the node; ``NodeSession`` admits only a session placed on that node, and
every call acts for that session's owner alone: the model store under the owner's prefix.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from gpuslice.common.schemas.models import (
    ModelPresign,
    ModelPublic,
    ModelUploadComplete,
    ModelUploadStart,
    ModelUploadStarted,
    ModelUrls,
)
from gpuslice.manager.api.deps import DbDep, ModelStoreDep, NodeSession, SettingsDep
from gpuslice.manager.api.edge import node_body
from gpuslice.manager.api.routes.models import PathQuery
from gpuslice.manager.services.models import catalog

router = APIRouter(prefix="/agents/me/sessions/{session_id}", tags=["in-session"])


@router.post("/models/uploads", status_code=status.HTTP_201_CREATED)
@node_body
async def start_upload(
    body: ModelUploadStart, session: NodeSession, request: Request, db: DbDep,
    store: ModelStoreDep, settings: SettingsDep,
) -> ModelUploadStarted:
    """Begin saving a model for the session's owner: presigned PUT URLs when the store takes
    uploads directly (S3, `model_store.url_ttl` seconds), else `stream` (through the agent)."""
    return await catalog.start_upload(
        db, store, session.owner_id, body, quota=settings.model_store.user_quota,
        session_id=session.id, presign_ttl=settings.model_store.url_ttl,
        base_url=str(request.base_url),
    )


@router.put("/models/file", status_code=status.HTTP_204_NO_CONTENT,
            openapi_extra={"x-gpuslice-streamed-body": True})
async def upload_file(
    upload_id: str, path: PathQuery, session: NodeSession, request: Request, db: DbDep,
    store: ModelStoreDep,
) -> None:
    """One file of the session's upload, streamed through the agent (local store)."""
    await catalog.put_file(db, store, session.owner_id, upload_id, path, request.stream())


@router.post("/models/complete")
@node_body
async def complete_upload(
    body: ModelUploadComplete, session: NodeSession, db: DbDep, store: ModelStoreDep
) -> ModelPublic:
    """Make the session's upload a saved model of its owner: the next version of its name."""
    return await catalog.complete(db, store, session.owner_id, body.upload_id)


@router.post("/models/presign")
@node_body
async def presign(
    body: ModelPresign, session: NodeSession, request: Request, db: DbDep, store: ModelStoreDep
) -> ModelUrls:
    """Short-lived download URLs for one of the session owner's models."""
    return await catalog.presign_get(db, store, session.owner_id, body.name, body.ttl,
                                     str(request.base_url))
