"""The local model store's presigned URLs: the signature in the URL is the only credential."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse

from gpuslice.manager.api.deps import ModelStoreDep
from gpuslice.manager.services.models import presigned

router = APIRouter(prefix="/model-store", tags=["models"])
Expires = Annotated[int, Query(ge=0, description="Unix time the URL expires.")]
Signature = Annotated[str, Query(min_length=64, max_length=64)]


@router.get("/{key:path}", response_class=StreamingResponse)
async def fetch(
    key: str, store: ModelStoreDep, expires: Expires, signature: Signature,
    method: Annotated[str, Query(pattern="^GET$")] = "GET",
) -> StreamingResponse:
    """Fetch one object of the local store with a presigned URL (403 once it expired)."""
    chunks, size = await presigned.open_signed(store, key, expires, signature)
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})


@router.put("/{key:path}", status_code=status.HTTP_204_NO_CONTENT,
            openapi_extra={"x-gpuslice-streamed-body": True})
async def store_object(
    key: str, request: Request, store: ModelStoreDep, expires: Expires, signature: Signature,
    method: Annotated[str, Query(pattern="^PUT$")] = "PUT",
) -> None:
    """Store one object of an upload with a presigned PUT URL (403 once it expired)."""
    await presigned.put_signed(store, key, expires, signature, request)
