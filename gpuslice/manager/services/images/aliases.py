"""Image aliases: short names admins give references (``tf2`` → ``gpuslice/tensorflow:2.16``).

An alias resolves when a session is created (``images.resolve``); it never hides an image's
visibility: an alias to another user's private image resolves to an unknown image, and the
listing leaves it out for everyone but its owner and admins.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.images import ImageAliasCreate, ImageAliasPublic
from gpuslice.manager.db.models import ImageAliasRow, UserRow
from gpuslice.manager.errors import Conflict, NotFound
from gpuslice.manager.services.images.catalog import invisible_references, reference_or_error


async def list_aliases(db: AsyncSession, viewer: UserRow) -> list[ImageAliasPublic]:
    """The aliases, but for those pointing to an image the viewer may not see (another user's
    private image): they are left out, so the listing never reveals it."""
    hidden = await invisible_references(db, viewer)
    rows = await db.scalars(select(ImageAliasRow).order_by(ImageAliasRow.name))
    return [_public(r) for r in rows if r.reference not in hidden]


async def set_alias(db: AsyncSession, body: ImageAliasCreate) -> ImageAliasPublic:
    """Create the alias, or point an existing one at another reference."""
    reference = reference_or_error(body.reference, "reference")
    row = await db.get(ImageAliasRow, body.name)
    if row is None:
        row = ImageAliasRow(name=body.name, reference=reference)
        db.add(row)
    row.reference = reference
    try:
        await db.commit()
    except IntegrityError:  # another request created this alias at the same instant
        await db.rollback()
        raise Conflict(f"image alias {body.name!r} was created by another request just now; "
                       "set it again to point it here", field="name",
                       code="alias_busy") from None
    return _public(row)


async def delete_alias(db: AsyncSession, name: str) -> None:
    result = await db.execute(delete(ImageAliasRow).where(ImageAliasRow.name == name))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"no image alias {name!r}", field="name")
    await db.commit()


def _public(row: ImageAliasRow) -> ImageAliasPublic:
    return ImageAliasPublic(name=row.name, reference=row.reference, created_at=row.created_at)
