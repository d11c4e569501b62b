"""The image catalog: listing for everyone, aliases and curation for admins."""

from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.images import (
    ImageAliasCreate,
    ImageAliasPublic,
    ImageCreate,
    ImagePublic,
    ImageRescan,
    ImageUpdate,
    ImageUpdated,
)
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep, SettingsDep
from gpuslice.manager.services.images import aliases, catalog

router = APIRouter(prefix="/images", tags=["images"])


@router.get("")
async def list_images(db: DbDep, settings: SettingsDep, user: CurrentUser) -> list[ImagePublic]:
    """Images the caller may use: public ones and their own private ones (admins: all), with
    title, frameworks, size, apps, minimum resources, visibility and the nodes having them."""
    return await catalog.list_images(db, user, settings.sessions.allowed_images)


@router.post("", status_code=status.HTTP_201_CREATED)
async def allow_image(body: ImageCreate, db: DbDep, _admin: AdminUser) -> ImagePublic:
    """Add an image to the allow list: public and accepted even before a node has it."""
    return await catalog.allow_image(db, body)


@router.post("/rescan")
async def rescan(db: DbDep, settings: SettingsDep, _admin: AdminUser) -> ImageRescan:
    """Read the configured registry's images and ask every alive node to report its images now
    (admins only); 409 `registry_unreachable` when the registry cannot be read."""
    return await catalog.rescan(db, settings.registry)


@router.get("/aliases")
async def list_aliases(db: DbDep, user: CurrentUser) -> list[ImageAliasPublic]:
    """Short names for image references (those of images the caller may see)."""
    return await aliases.list_aliases(db, user)


@router.post("/aliases", status_code=status.HTTP_201_CREATED)
async def set_alias(body: ImageAliasCreate, db: DbDep, _admin: AdminUser) -> ImageAliasPublic:
    """Create an alias, or point an existing one elsewhere (admins only)."""
    return await aliases.set_alias(db, body)


@router.delete("/aliases/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_alias(name: str, db: DbDep, _admin: AdminUser) -> None:
    """Delete an alias (admins only)."""
    await aliases.delete_alias(db, name)


@router.patch("/{name:path}")
async def update_image(
    name: str, body: ImageUpdate, db: DbDep, _admin: AdminUser
) -> ImageUpdated:
    """Make an image public, e.g. one committed from a session, or private again (admins only).
    The answer's `exposes` says what publishing made readable to every user."""
    return await catalog.update_image(db, name, body)


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_image(name: str, db: DbDep, settings: SettingsDep, _admin: AdminUser) -> None:
    """Remove an image from the catalog; nodes delete it once no container uses it (admins)."""
    await catalog.remove_image(db, name, settings.sessions.allowed_images)
