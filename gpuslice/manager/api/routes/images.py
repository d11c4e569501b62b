from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.agents import ImageCreate, ImagePublic
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep, SettingsDep
from gpuslice.manager.services import images

router = APIRouter(prefix="/images", tags=["images"])


@router.get("")
async def list_images(db: DbDep, settings: SettingsDep, _user: CurrentUser) -> list[ImagePublic]:
    """Images sessions may use: the allow list and what alive nodes have."""
    return await images.list_images(db, settings.sessions.allowed_images)


@router.post("", status_code=status.HTTP_201_CREATED)
async def allow_image(body: ImageCreate, db: DbDep, _admin: AdminUser) -> ImagePublic:
    """Add an image name to the allow list (admins only)."""
    return await images.allow_image(db, body.name)


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT)
async def disallow_image(name: str, db: DbDep, _admin: AdminUser) -> None:
    """Remove an image name from the allow list (admins only)."""
    await images.disallow_image(db, name)
