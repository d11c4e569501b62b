"""The image catalog: what sessions may run, who may see it, and the admins' hand on it.

Rows come from node reports (``image_reports``), the configured registry, the admin allow list
and commits. An image is *usable* when it is on the allow list (the settings' or the table's),
in the registry (nodes pull it on demand) or an alive node has it.
Visibility: public images for everyone, a private one for its owner and admins; another user's
private image is answered exactly like an unknown one, so its existence never leaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.image_refs import InvalidReference, is_user_image, normalize
from gpuslice.common.images import LABEL_GPU, ImageMeta, image_kind
from gpuslice.common.resources import (
    Resources,
    fgpu_decimal,
    format_cpu,
    format_fgpu,
    format_mem,
)
from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.common.schemas.images import (
    ImageAppPublic,
    ImageCreate,
    ImagePublic,
    ImageRescan,
    ImageUpdate,
    ImageUpdated,
)
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ImageAliasRow, ImageNodeRow, ImageRow, NodeRow, UserRow
from gpuslice.manager.errors import Conflict, InvalidRequest, NotFound
from gpuslice.manager.events import wake_after_commit
from gpuslice.manager.services.images import registry
from gpuslice.manager.services.images import reports as image_reports
from gpuslice.manager.settings import RegistrySettings

ALLOWED = "allowed"
REGISTRY = "registry"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The image a session asked for: its catalog reference and what it says about itself."""

    reference: str
    meta: ImageMeta


async def list_images(
    db: AsyncSession, viewer: UserRow, configured: Sequence[str]
) -> list[ImagePublic]:
    """Usable images the viewer may see, by name."""
    settings_list = configured_set(configured)
    rows = (await db.scalars(_visible(select(ImageRow), viewer))).all()
    nodes = await _alive_nodes_by_image(db, [r.name for r in rows])
    aliases = await _aliases_by_reference(db)
    owners = await _usernames(db, {r.owner_id for r in rows if r.owner_id})
    answer = {
        row.name: _public(row, nodes.get(row.name, []), aliases, owners, row.name in settings_list)
        for row in rows
        if row.allowed or row.in_registry or nodes.get(row.name) or row.name in settings_list
    }
    stored = set(await db.scalars(select(ImageRow.name).where(ImageRow.name.in_(settings_list))))
    for name in settings_list - stored:
        answer[name] = ImagePublic(name=name, sources=[ALLOWED], aliases=aliases.get(name, []),
                                   kind=image_kind(name, ImageMeta()))
    return [answer[name] for name in sorted(answer)]


async def resolve(
    db: AsyncSession, viewer: UserRow, wanted: str, resources: Resources, configured: Sequence[str]
) -> Resolved:
    """The usable image ``wanted`` names (an alias or a reference) for a session of ``resources``.

    Raises ``InvalidRequest`` ``invalid_image`` (malformed) or ``below_image_minimum`` (naming
    the minimum), or ``NotFound`` ``unknown_image`` (unknown, or another user's private image:
    answered alike, so a private image's existence is never revealed).
    """
    alias = await db.get(ImageAliasRow, wanted)
    target = alias.reference if alias is not None else wanted
    reference = _reference(target, field="image", code="invalid_image")
    row = await db.scalar(_visible(select(ImageRow).where(ImageRow.name == reference), viewer))
    configured_here = reference in configured_set(configured)
    if row is not None:
        usable = row.allowed or row.in_registry or configured_here or bool(
            await _alive_nodes_by_image(db, [reference])
        )
    else:  # unknown, removed, or another user's private image: all answered alike
        usable = configured_here and await db.get(ImageRow, reference) is None
    if not usable:
        # An alias's target is named only when the caller may see it: an alias to someone's
        # private image must read exactly like an unknown name.
        via = f" (alias of {reference!r})" if alias is not None and row is not None else ""
        raise NotFound(
            f"unknown image {wanted!r}{via}: no node has it and it is not on the allow list "
            "(the launch dialog and `gpuslice image list` show the ones you can use)",
            field="image", code="unknown_image",
        )
    meta = ImageMeta.from_labels(row.labels if row is not None else None)
    _check_minimum(reference, meta, resources)
    return Resolved(reference, meta)


async def allow_image(db: AsyncSession, body: ImageCreate) -> ImagePublic:
    """Put an image on the allow list: public and always accepted (a removed one comes back)."""
    name = _reference(body.name, field="name", code="invalid_image")
    if is_user_image(name):
        raise Conflict(
            f"{name!r} is in the users' namespace (u/…), where committed images live; make "
            "one public with `gpuslice image publish` instead", field="name",
            code="reserved_name",
        )
    row = await db.get(ImageRow, name)
    if row is not None and row.allowed and row.removed_at is None:
        raise Conflict(f"image {name!r} is already allowed", field="name")
    if row is not None and not row.public and row.removed_at is None:
        owner = (await _usernames(db, {row.owner_id} if row.owner_id else set())).get(
            row.owner_id or "", "admins only"
        )
        raise Conflict(
            f"{name!r} is a private image ({owner}"
            + (f", committed from session {row.origin_session_id}" if row.origin_session_id
               else "")
            + "): allowing it would run that image in everyone's sessions of this name. "
            "Remove it first, or review it and publish it explicitly "
            "(`gpuslice image publish`)", field="name", code="image_private",
        )
    if row is None:
        row = ImageRow(name=name, labels={})
        db.add(row)
    row.allowed, row.public, row.removed_at = True, True, None
    try:
        await db.commit()
    except IntegrityError:  # the same image allowed (or reported) by another request just now
        await db.rollback()
        raise Conflict(f"image {name!r} was added by another request just now; see it with "
                       "`gpuslice image list`", field="name", code="image_busy") from None
    return ImagePublic(name=name, sources=[ALLOWED], public=True,
                       kind=image_kind(name, ImageMeta()))


async def remove_image(db: AsyncSession, name: str, configured: Sequence[str]) -> None:
    """Take an image out of the catalog and ask the nodes that have it to delete it."""
    if _stored_name(name) in configured_set(configured):
        raise Conflict(
            f"image {name!r} is on the manager's settings allow list "
            "(sessions.allowed_images); remove it there", code="image_configured",
        )
    row = await _get(db, name)
    row.removed_at, row.allowed = utcnow(), False
    nodes = await db.scalars(
        select(ImageNodeRow.node_id).where(ImageNodeRow.image_name == row.name)
    )
    await _bump_nodes(db, list(nodes), rescan=False)
    await db.commit()


async def update_image(db: AsyncSession, name: str, body: ImageUpdate) -> ImageUpdated:
    """Make an image public (or private again: then only its owner and admins see it); the
    answer says what publishing exposes."""
    row = await _get(db, name)
    row.public = body.public
    await db.commit()
    nodes = await _alive_nodes_by_image(db, [row.name])
    owners = await _usernames(db, {row.owner_id} if row.owner_id else set())
    image = _public(row, nodes.get(row.name, []), await _aliases_by_reference(db), owners)
    return ImageUpdated(**image.model_dump(), exposes=_exposes(image) if body.public else None)


def _exposes(image: ImagePublic) -> str:
    what = f"{image.name} is now public: every user sees it in the catalog and may run it"
    if image.origin_session is None:
        return f"{what}."
    size = f", {format_mem(image.size)}" if image.size else ""
    return (
        f"{what}. It is the filesystem of session {image.origin_session} of "
        f"{image.owner or 'a user'}{size}: everything that session installed or wrote outside "
        "its storage folders (packages, files in the home directory, shell history, caches, "
        "any credentials left in files) is readable by anyone who runs it."
    )


async def rescan(db: AsyncSession, settings: RegistrySettings) -> ImageRescan:
    """Read the configured registry's images (first: no transaction is open across it), then
    ask every alive node to report its images now (their assignments long-poll wakes)."""
    found = None
    if settings.url is not None:
        try:
            found = await registry.list_images(settings)
        except registry.RegistryError as err:
            raise Conflict(str(err), code="registry_unreachable") from None
    nodes = list(await db.scalars(select(NodeRow.id).where(NodeRow.status == NodeStatus.ALIVE)))
    await _bump_nodes(db, nodes, rescan=True)
    await db.commit()
    in_registry = None if found is None else await image_reports.sync_registry(db, found)
    return ImageRescan(nodes=len(nodes), registry=in_registry)


async def get_visible(db: AsyncSession, viewer: UserRow, name: str) -> ImageRow:
    """One catalog row the viewer may see; else ``NotFound`` (never revealing a private one)."""
    reference = _reference(name, field="name", code="invalid_image")
    row = await db.scalar(_visible(select(ImageRow).where(ImageRow.name == reference), viewer))
    if row is None:
        raise NotFound(f"no image {name!r} in the catalog", field="name", code="unknown_image")
    return row


def reference_or_error(value: str, field: str) -> str:
    """``value`` in the catalog's spelling; ``InvalidRequest`` ``invalid_image`` if malformed."""
    return _reference(value, field=field, code="invalid_image")


# ------------------------------------------------------------------ helpers


def _visible(query: Select[tuple[ImageRow]], viewer: UserRow) -> Select[tuple[ImageRow]]:
    query = query.where(ImageRow.removed_at.is_(None))
    if viewer.role == Role.ADMIN:
        return query
    return query.where(or_(ImageRow.public.is_(True), ImageRow.owner_id == viewer.id))


async def _get(db: AsyncSession, name: str) -> ImageRow:
    try:
        reference = normalize(name)
    except InvalidReference as err:
        # A row stored before today's rules (a name over 255 characters) stays reachable by
        # its exact name, so that an admin can still make it private or remove it.
        row = await db.get(ImageRow, name.strip())
        if row is None or row.removed_at is not None:
            raise InvalidRequest(str(err), field="name", code="invalid_image") from None
        return row
    row = await db.get(ImageRow, reference)
    if row is None or row.removed_at is not None:
        raise NotFound(f"no image {name!r} in the catalog", field="name", code="unknown_image")
    return row


def _stored_name(value: str) -> str:
    """The catalog's spelling, or the name as given when today's rules refuse it."""
    try:
        return normalize(value)
    except InvalidReference:
        return value.strip()


def _reference(value: str, *, field: str, code: str) -> str:
    try:
        return normalize(value)
    except InvalidReference as err:
        raise InvalidRequest(str(err), field=field, code=code) from None


def configured_set(configured: Sequence[str]) -> set[str]:
    names = set()
    for name in configured:
        try:
            names.add(normalize(name))
        except InvalidReference:
            continue  # settings validate their own list; a bad entry simply matches nothing
    return names


def _check_minimum(reference: str, meta: ImageMeta, asked: Resources) -> None:
    for need, have, what, fmt in (
        (meta.min_gpu, asked.gpu, "fGPU", format_fgpu),
        (meta.min_cpu, asked.cpu, "CPU cores", format_cpu),
        (meta.min_mem, asked.mem, "of memory", format_mem),
    ):
        if need and have < need:
            raise InvalidRequest(
                f"image {reference} needs at least {fmt(need)} {what}; you asked for {fmt(have)}",
                field="resources", code="below_image_minimum",
            )


async def _bump_nodes(db: AsyncSession, node_ids: list[str], *, rescan: bool) -> None:
    if not node_ids:
        return
    values = {"assignment_version": NodeRow.assignment_version + 1}
    if rescan:
        values["rescan"] = NodeRow.rescan + 1
    await db.execute(update(NodeRow).where(NodeRow.id.in_(node_ids)).values(**values))
    for node_id in node_ids:
        wake_after_commit(db, "node", node_id)


async def _alive_nodes_by_image(db: AsyncSession, names: list[str]) -> dict[str, list[str]]:
    if not names:
        return {}
    rows = await db.execute(
        select(ImageNodeRow.image_name, NodeRow.name)
        .join(NodeRow, NodeRow.id == ImageNodeRow.node_id)
        .where(ImageNodeRow.image_name.in_(names), NodeRow.status == NodeStatus.ALIVE)
        .order_by(NodeRow.name)
    )
    found: dict[str, list[str]] = {}
    for image, node in rows.all():
        found.setdefault(image, []).append(node)
    return found


async def invisible_references(db: AsyncSession, viewer: UserRow) -> set[str]:
    """Catalog names ``viewer`` may not see (others' private images; none for admins)."""
    if viewer.role == Role.ADMIN:
        return set()
    return set(await db.scalars(
        select(ImageRow.name).where(
            ImageRow.removed_at.is_(None), ImageRow.public.is_(False),
            or_(ImageRow.owner_id.is_(None), ImageRow.owner_id != viewer.id),
        )
    ))


async def _aliases_by_reference(db: AsyncSession) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for alias in await db.scalars(select(ImageAliasRow).order_by(ImageAliasRow.name)):
        found.setdefault(alias.reference, []).append(alias.name)
    return found


async def _usernames(db: AsyncSession, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    rows = await db.execute(select(UserRow.id, UserRow.username).where(UserRow.id.in_(ids)))
    return dict(rows.tuples().all())


def _public(
    row: ImageRow,
    nodes: list[str],
    aliases: dict[str, list[str]],
    owners: dict[str, str],
    configured: bool = False,
) -> ImagePublic:
    meta = ImageMeta.from_labels(row.labels)
    owner = owners.get(row.owner_id) if row.owner_id else None
    allowed = ([ALLOWED] if row.allowed or configured else []) + (
        [REGISTRY] if row.in_registry else []
    )
    return ImagePublic(
        name=row.name, sources=allowed + nodes, title=meta.title,
        frameworks=meta.frameworks, image_id=row.image_id, size=row.size,
        apps=[ImageAppPublic(name=a.name, protocol=a.protocol, port=a.port) for a in meta.apps],
        gpu=meta.gpu, min_gpu=fgpu_decimal(meta.min_gpu), min_cpu=fgpu_decimal(meta.min_cpu),
        min_mem=meta.min_mem, public=row.public, owner=owner or meta.owner,
        origin_session=row.origin_session_id or meta.origin_session, nodes=nodes,
        aliases=aliases.get(row.name, []), created_at=row.created_at,
        kind=image_kind(row.name, meta, public=row.public),
        cpu_only=bool((row.labels or {}).get(LABEL_GPU)) and not meta.gpu,
    )
