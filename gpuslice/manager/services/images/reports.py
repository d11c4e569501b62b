"""What nodes report about their images, into the catalog; what they must delete.

Each heartbeat replaces the node's presence rows (``image_nodes``). A reference new to the
catalog gets a row: public, unless its labels name an owner (a committed image found on a node
before, or without, the manager recording it): then it is private to that user, or to admins
when no such user exists. Visibility of a known row never changes on a report. A removed row
(tombstone) stays removed while nodes report the same image id; another id (a rebuild) brings
it back.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.image_refs import InvalidReference, is_user_image, normalize, user_namespace
from gpuslice.common.images import ImageMeta
from gpuslice.common.schemas.agents import Heartbeat, ImageReport
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ImageNodeRow, ImageRow, UserRow
from gpuslice.manager.services.images.registry import RegistryImage


async def sync_node(db: AsyncSession, node_id: str, body: Heartbeat) -> None:
    """Record the node's images (flushes; the caller commits)."""
    reports = _reports(body)
    await _ensure_rows(db, reports)
    await _refresh(db, reports)
    await db.execute(delete(ImageNodeRow).where(ImageNodeRow.node_id == node_id))
    if reports:  # a commit may be recording one of them at the same instant
        await _insert_ignoring_conflicts(db, ImageNodeRow, [
            {"image_name": name, "node_id": node_id, "image_id": r.image_id, "size": r.size}
            for name, r in reports.items()
        ])


async def sync_registry(db: AsyncSession, found: list[RegistryImage]) -> int:
    """Record the registry's images (public unless their labels name an owner); images no
    longer there lose the registry mark. Commits; returns how many the registry has."""
    reports: dict[str, ImageReport] = {}
    for image in found:
        try:
            reports[normalize(image.reference)] = ImageReport(
                tag=image.reference, image_id=image.image_id, size=image.size,
                labels=image.labels,
            )
        except InvalidReference:
            continue
    await _ensure_rows(db, reports)
    await _refresh(db, reports)
    await db.execute(
        update(ImageRow).where(ImageRow.in_registry.is_(True), ImageRow.name.not_in(list(reports)))
        .values(in_registry=False)
    )
    if reports:
        await db.execute(
            update(ImageRow).where(ImageRow.name.in_(list(reports))).values(in_registry=True)
        )
    await db.commit()
    return len(reports)


# Built once: every answer to a node's long-poll asks both (see nodes/assignments.py).
_REMOVALS = (
    select(ImageNodeRow.image_name)
    .join(ImageRow, ImageRow.name == ImageNodeRow.image_name)
    .where(ImageNodeRow.node_id == bindparam("node"), ImageRow.removed_at.is_not(None))
    .order_by(ImageNodeRow.image_name)
)
_PULLS = select(ImageRow.name).where(
    ImageRow.name.in_(bindparam("images", expanding=True)), ImageRow.in_registry.is_(True),
    ImageRow.name.not_in(
        select(ImageNodeRow.image_name).where(ImageNodeRow.node_id == bindparam("node"))
    ),
)


async def removals_for(db: AsyncSession, node_id: str) -> list[str]:
    """Removed images the node still has: it deletes them once no container uses them."""
    return list(await db.scalars(_REMOVALS, {"node": node_id}))


async def pulls_for(db: AsyncSession, node_id: str, images: set[str]) -> set[str]:
    """Of ``images``, those the node must pull: in the registry and not reported by it."""
    if not images:
        return set()
    return set(await db.scalars(_PULLS, {"node": node_id, "images": sorted(images)}))


async def ensure_present(
    db: AsyncSession, name: str, node_id: str, image_id: str | None, size: int | None
) -> ImageRow:
    """The catalog row of ``name`` with the node's presence, created when missing (a commit's
    new image, which the node's heartbeat may be recording at the same instant)."""
    await _insert_ignoring_conflicts(db, ImageRow, [{
        "name": name, "created_at": utcnow(), "allowed": False, "image_id": image_id,
        "size": size, "labels": {}, "public": False,
    }])
    await _insert_ignoring_conflicts(db, ImageNodeRow, [{
        "image_name": name, "node_id": node_id, "image_id": image_id, "size": size,
    }])
    row = await db.get(ImageRow, name, populate_existing=True)
    assert row is not None  # just inserted, or there already
    return row


async def _refresh(db: AsyncSession, reports: dict[str, ImageReport]) -> None:
    """Known rows take the reported id, size and labels; a rebuilt removed image comes back."""
    rows = {
        r.name: r
        for r in await db.scalars(select(ImageRow).where(ImageRow.name.in_(list(reports))))
    }
    for name, report in reports.items():
        row = rows[name]
        if row.removed_at is not None and report.image_id and row.image_id != report.image_id:
            row.removed_at = None  # rebuilt under the same name: a new image
        if report.image_id and (row.image_id, row.size, row.labels) != (
            report.image_id, report.size, report.labels
        ) and row.removed_at is None:
            row.image_id, row.size, row.labels = report.image_id, report.size, report.labels
    await db.flush()


def _reports(body: Heartbeat) -> dict[str, ImageReport]:
    if body.image_details is not None:
        given = body.image_details
    else:  # an agent that sends tags only
        given = [ImageReport(tag=tag) for tag in body.images]
    reports: dict[str, ImageReport] = {}
    for report in given:
        try:
            reports[normalize(report.tag)] = report
        except InvalidReference:
            continue  # Docker never reports one; a tag the catalog cannot name is skipped
    return reports


async def _ensure_rows(db: AsyncSession, reports: dict[str, ImageReport]) -> None:
    known = set(await db.scalars(select(ImageRow.name).where(ImageRow.name.in_(list(reports)))))
    new = [(name, r) for name, r in reports.items() if name not in known]
    if not new:
        return
    owners = {ImageMeta.from_labels(r.labels).owner for _n, r in new} - {None}
    user_ids = dict(
        (await db.execute(
            select(UserRow.username, UserRow.id).where(UserRow.username.in_(owners))
        ))
        .tuples().all()
    ) if owners else {}
    values = []
    for name, report in new:
        meta = ImageMeta.from_labels(report.labels)
        owner_id = user_ids.get(meta.owner) if meta.owner else None
        if is_user_image(name) and not (
            meta.owner and name.startswith(f"{user_namespace(meta.owner)}/")
        ):
            owner_id = None  # in u/… but not its labelled owner's: admins only, never public
        values.append({
            "name": name, "created_at": utcnow(), "allowed": False,
            "image_id": report.image_id, "size": report.size, "labels": report.labels,
            "public": meta.owner is None and not is_user_image(name),
            "owner_id": owner_id, "origin_session_id": meta.origin_session,
        })
    # Two nodes may report a new image at once: the second insert must not fail.
    await _insert_ignoring_conflicts(db, ImageRow, values)


async def _insert_ignoring_conflicts(
    db: AsyncSession, model: type[ImageRow] | type[ImageNodeRow], values: list[dict[str, Any]]
) -> None:
    dialect = postgresql if db.bind.dialect.name == "postgresql" else sqlite
    await db.execute(dialect.insert(model).values(values).on_conflict_do_nothing())
