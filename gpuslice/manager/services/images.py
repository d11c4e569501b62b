"""Images the manager accepts: the settings' allow list, admin-added names, and what nodes have.

Small on purpose: a full image catalog (versions, metadata) is a later issue.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import ImagePublic
from gpuslice.manager.db.models import Image, NodeRow
from gpuslice.manager.errors import Conflict, NotFound

ALLOWED = "allowed"


async def list_images(db: AsyncSession, configured: Sequence[str]) -> list[ImagePublic]:
    sources: dict[str, list[str]] = {name: [ALLOWED] for name in configured}
    for name in await db.scalars(select(Image.name)):
        sources.setdefault(name, [ALLOWED])
    for node, images in (
        await db.execute(select(NodeRow.name, NodeRow.images).where(NodeRow.status == "ALIVE"))
    ).all():
        for name in images:
            sources.setdefault(name, []).append(node)
    return [ImagePublic(name=n, sources=s) for n, s in sorted(sources.items())]


async def is_known(db: AsyncSession, name: str, configured: Sequence[str]) -> bool:
    if name in configured or await db.get(Image, name) is not None:
        return True
    node_images = await db.scalars(select(NodeRow.images).where(NodeRow.status == "ALIVE"))
    return any(name in images for images in node_images)


async def allow_image(db: AsyncSession, name: str) -> ImagePublic:
    db.add(Image(name=name))
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"image {name!r} is already allowed", field="name") from None
    return ImagePublic(name=name, sources=[ALLOWED])


async def disallow_image(db: AsyncSession, name: str) -> None:
    result = await db.execute(delete(Image).where(Image.name == name))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NotFound(f"image {name!r} is not on the admin allow list")
    await db.commit()
