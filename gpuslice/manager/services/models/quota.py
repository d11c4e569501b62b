"""Room for an upload: each user's model-store quota (``model_store.user_quota``) and, for a
store that can tell, its free space; both checked on what an upload announces, before any byte
is sent. Every version and every upload in progress counts against the quota."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import format_mem
from gpuslice.manager.db.models import ModelRow
from gpuslice.manager.errors import TooLarge
from gpuslice.manager.services.models.store import ModelStore


async def check_room(
    db: AsyncSession, store: ModelStore, owner_id: str, size: int, quota: int,
    *, counted: bool = False,
) -> None:
    """Refuse (413) an upload of ``size`` bytes that would take the owner over ``quota`` or
    the store past its free space. ``counted``: the upload's own row is already in the
    database (the check after inserting it, which two uploads racing cannot both pass)."""
    used = await used_bytes(db, owner_id) - (size if counted else 0)
    await db.commit()
    if used + size > quota:
        raise TooLarge(
            f"this upload announces {format_mem(size)}, and your models already take "
            f"{format_mem(used)} of your model-store quota of {format_mem(quota)} "
            "(model_store.user_quota): delete versions you no longer need (gpuslice model "
            "delete NAME:VERSION) or ask an admin to raise it",
            field="files", code="model_quota_exceeded")
    if counted:
        return  # the store's space was checked before the row was made
    free = await store.free_space()
    if free is not None and size > free:
        raise TooLarge(f"this upload announces {format_mem(size)}, more than the "
                       f"{format_mem(free)} the model store has free",
                       field="files", code="model_store_full")


async def used_bytes(db: AsyncSession, owner_id: str) -> int:
    """What the owner's models take: every version, and uploads not yet complete."""
    total = await db.scalar(select(func.coalesce(func.sum(ModelRow.size), 0)).where(
        ModelRow.owner_id == owner_id, ModelRow.status != "deleted"))  # catalog.DELETED
    return int(total or 0)
