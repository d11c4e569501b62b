from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.priorities import (
    PriorityClassCreate,
    PriorityClassPublic,
    PriorityClassUpdate,
)
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep
from gpuslice.manager.services import priorities

router = APIRouter(prefix="/priority-classes", tags=["priority-classes"])


@router.get("")
async def list_classes(db: DbDep, user: CurrentUser) -> list[PriorityClassPublic]:
    """Priority classes, highest rank first (every user: they pick one at launch; those no
    project of theirs may use are not listed to them)."""
    return await priorities.list_classes(db, user)


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_class(
    body: PriorityClassCreate, db: DbDep, _admin: AdminUser
) -> PriorityClassPublic:
    """Add a priority class; `default: true` makes it the class of sessions naming none
    (admins only)."""
    return await priorities.create_class(db, body)


@router.patch("/{name}")
async def update_class(
    name: str, body: PriorityClassUpdate, db: DbDep, _admin: AdminUser
) -> PriorityClassPublic:
    """Change a class's rank, minimum runtime, grace or interactive rule, or make it the
    default (admins only)."""
    return await priorities.update_class(db, name, body)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_class(name: str, db: DbDep, _admin: AdminUser) -> None:
    """Remove a class no unfinished session uses (admins only)."""
    await priorities.delete_class(db, name)
