from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.presets import PresetCreate, PresetPublic, PresetUpdate
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep
from gpuslice.manager.services import presets

router = APIRouter(prefix="/presets", tags=["presets"])


@router.get("")
async def list_presets(db: DbDep, _user: CurrentUser) -> list[PresetPublic]:
    """Resource presets the launch dialog offers, the default first (every user)."""
    return await presets.list_presets(db)


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_preset(body: PresetCreate, db: DbDep, _admin: AdminUser) -> PresetPublic:
    """Add a resource preset; `default: true` makes it the one preselected (admins only)."""
    return await presets.create_preset(db, body)


@router.patch("/{name}")
async def update_preset(
    name: str, body: PresetUpdate, db: DbDep, _admin: AdminUser
) -> PresetPublic:
    """Change a preset's values or make it the default (admins only)."""
    return await presets.update_preset(db, name, body)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_preset(name: str, db: DbDep, _admin: AdminUser) -> None:
    """Remove a preset; sessions launched with it are not touched (admins only)."""
    await presets.delete_preset(db, name)
