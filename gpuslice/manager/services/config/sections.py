"""One class per section of the configuration document: how it is exported and merged.

A section merges by name: an entry that does not exist is created, one that differs is updated,
one that is equal is left alone (so importing the same document twice changes nothing). A new
kind of configuration (e.g. storage folders and grants) is one more class in `SECTIONS`, after
the sections it refers to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.config import (
    AliasConfig,
    ConfigDocument,
    ImageConfig,
    PolicyConfig,
    PresetConfig,
    PriorityClassConfig,
    SectionResult,
    UserConfig,
)
from gpuslice.manager.db.models import (
    ImageAliasRow,
    ImageRow,
    PriorityClassRow,
    ResourcePolicyRow,
    ResourcePresetRow,
    UserRow,
)
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services import policies, priorities
from gpuslice.manager.services.images.catalog import reference_or_error
from gpuslice.manager.services.storage import grants

log = logging.getLogger(__name__)
R = TypeVar("R")

# A password no argon2 verification accepts: a user imported without a hash cannot log in.
NO_PASSWORD = "!imported-without-password"


@dataclass
class Outcome:
    """What an import did, per section, and what the admin must still do."""

    sections: dict[str, SectionResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def count(self, section: str, created: bool, changed: bool) -> None:
        result = self.sections.setdefault(section, SectionResult())
        if created:
            result.created += 1
        elif changed:
            result.updated += 1
        else:
            result.unchanged += 1


class Section(Protocol):
    @property
    def name(self) -> str: ...

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]: ...

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None: ...


def _apply(row: Any, values: dict[str, Any]) -> bool:
    """Set ``values`` on ``row``; whether anything changed."""
    changed = False
    for key, value in values.items():
        if getattr(row, key) != value:
            setattr(row, key, value)
            changed = True
    return changed


class Policies:
    name = "policies"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        rows = await db.scalars(select(ResourcePolicyRow).order_by(ResourcePolicyRow.name))
        return _entries(rows, lambda r: PolicyConfig.model_validate(_limits(r) | {"name": r.name}),
                        lambda r: f"policies: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.policies, "policies", lambda p: p.name)
        for item in doc.policies:
            row = await db.scalar(
                select(ResourcePolicyRow).where(ResourcePolicyRow.name == item.name)
            )
            values = {k: v for k, v in policies.columns(item).items() if k != "name"}
            if row is None:
                db.add(ResourcePolicyRow(name=item.name, **values))
            outcome.count(self.name, row is None, row is not None and _apply(row, values))
        await db.flush()


class Users:
    name = "users"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        policies = await _pairs(db, ResourcePolicyRow.id, ResourcePolicyRow.name)
        rows = await db.scalars(select(UserRow).order_by(UserRow.username))
        return _entries(rows, lambda u: UserConfig(
            username=u.username, role=u.role, is_active=u.is_active,
            policy=policies.get(u.policy_id) if u.policy_id else None,
            password_hash=u.password_hash if password_hashes and u.password_hash.startswith(
                "$argon2") else None,
        ), lambda u: f"users: {u.username!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.users, "users", lambda u: u.username)
        policies = await _pairs(db, ResourcePolicyRow.name, ResourcePolicyRow.id)
        without_password, created = [], list[UserRow]()
        for index, item in enumerate(doc.users):
            if item.policy is not None and item.policy not in policies:
                raise InvalidRequest(
                    f"users.{index}.policy: no policy named {item.policy!r} (neither in the "
                    "document's policies nor on this manager)", field=f"users.{index}.policy")
            values: dict[str, Any] = {
                "role": item.role.value, "is_active": item.is_active,
                "policy_id": policies.get(item.policy) if item.policy else None,
            }
            if item.password_hash is not None:
                values["password_hash"] = item.password_hash
            row = await db.scalar(select(UserRow).where(UserRow.username == item.username))
            if row is None:
                values.setdefault("password_hash", NO_PASSWORD)
                if values["password_hash"] == NO_PASSWORD:
                    without_password.append(item.username)
                created.append(UserRow(username=item.username, **values))
                db.add(created[-1])
            outcome.count(self.name, row is None, row is not None and _apply(row, values))
        if without_password:
            outcome.notes.append(
                f"{len(without_password)} new user(s) have no password yet and cannot log in "
                f"until an admin sets one: {', '.join(without_password[:10])}"
                + (", …" if len(without_password) > 10 else ""))
        await db.flush()
        await grants.claim_invites(db, *created)  # folders shared with their names before


class Aliases:
    name = "aliases"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        rows = await db.scalars(select(ImageAliasRow).order_by(ImageAliasRow.name))
        return _entries(rows, lambda r: AliasConfig(name=r.name, reference=r.reference),
                        lambda r: f"aliases: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.aliases, "aliases", lambda a: a.name)
        for index, item in enumerate(doc.aliases):
            reference = reference_or_error(item.reference, f"aliases.{index}.reference")
            row = await db.get(ImageAliasRow, item.name)
            if row is None:
                db.add(ImageAliasRow(name=item.name, reference=reference))
            outcome.count(self.name, row is None,
                          row is not None and _apply(row, {"reference": reference}))
        await db.flush()


class Images:
    name = "images"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        owners = await _pairs(db, UserRow.id, UserRow.username)
        rows = await db.scalars(
            select(ImageRow).where(ImageRow.removed_at.is_(None)).order_by(ImageRow.name))
        return _entries(rows, lambda r: ImageConfig(
            name=r.name, allowed=r.allowed, public=r.public,
            owner=owners.get(r.owner_id) if r.owner_id else None,
        ), lambda r: f"images: {r.name[:80]!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.images, "images", lambda i: i.name)
        users = await _pairs(db, UserRow.username, UserRow.id)
        for index, item in enumerate(doc.images):
            name = reference_or_error(item.name, f"images.{index}.name")
            if item.owner is not None and item.owner not in users:
                raise InvalidRequest(f"images.{index}.owner: no user named {item.owner!r}",
                                     field=f"images.{index}.owner")
            values = {"allowed": item.allowed, "public": item.public,
                      "owner_id": users.get(item.owner) if item.owner else None}
            row = await db.get(ImageRow, name)
            if row is None:
                db.add(ImageRow(name=name, labels={}, **values))
            outcome.count(self.name, row is None, row is not None and _apply(row, values))
        await db.flush()


class Presets:
    name = "presets"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        rows = await db.scalars(select(ResourcePresetRow).order_by(ResourcePresetRow.name))
        return _entries(rows, lambda r: PresetConfig(
            name=r.name, cpu=str(fgpu_decimal(r.cpu)), mem=r.mem, gpu=str(fgpu_decimal(r.gpu)),
            default=r.is_default,
        ), lambda r: f"presets: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.presets, "presets", lambda p: p.name)
        defaults = [p.name for p in doc.presets if p.default]
        if len(defaults) > 1:
            raise InvalidRequest(f"presets: {len(defaults)} defaults ({', '.join(defaults)}); "
                                 "at most one preset is the default", field="presets")
        if defaults:  # the document's default replaces this manager's
            await db.execute(update(ResourcePresetRow).where(
                ResourcePresetRow.name != defaults[0]).values(is_default=False))
        for item in doc.presets:
            values = {"cpu": item.cpu, "mem": item.mem, "gpu": item.gpu,
                      "is_default": item.default}
            row = await db.scalar(
                select(ResourcePresetRow).where(ResourcePresetRow.name == item.name))
            if row is None:
                db.add(ResourcePresetRow(name=item.name, **values))
            outcome.count(self.name, row is None, row is not None and _apply(row, values))
        await db.flush()


class PriorityClasses:
    name = "priority_classes"
    _FIELDS = ("rank", "min_runtime_s", "grace_s", "preempt_interactive")

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        rows = await db.scalars(select(PriorityClassRow).order_by(PriorityClassRow.name))
        limits = await priorities.project_names(db)
        return _entries(rows, lambda r: PriorityClassConfig(
            name=r.name, default=r.is_default, projects=limits.get(r.id, []),
            any_project=r.any_project,
            **{k: getattr(r, k) for k in self._FIELDS},
        ), lambda r: f"priority_classes: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.priority_classes, "priority_classes", lambda c: c.name)
        defaults = [c.name for c in doc.priority_classes if c.default]
        if len(defaults) > 1:
            raise InvalidRequest(
                f"priority_classes: {len(defaults)} defaults ({', '.join(defaults)}); at most "
                "one class is the default", field="priority_classes")
        if defaults:  # the document's default replaces this manager's
            await db.execute(update(PriorityClassRow).where(
                PriorityClassRow.name != defaults[0]).values(is_default=False))
        limits = await priorities.project_names(db)
        for index, item in enumerate(doc.priority_classes):
            values: dict[str, Any] = {k: getattr(item, k) for k in self._FIELDS}
            if defaults:  # else this manager's default stays (the platform keeps one)
                values["is_default"] = item.default
            row = await db.scalar(
                select(PriorityClassRow).where(PriorityClassRow.name == item.name))
            created = row is None
            if row is None:
                row = PriorityClassRow(name=item.name, **{"is_default": False, **values})
                db.add(row)
            changed = not created and _apply(row, values)
            wanted = sorted(set(item.projects))
            # unchanged limits are still refused to a class the document makes the default
            if wanted != limits.get(row.id, []) or (row.is_default and wanted) \
                    or created or row.any_project != item.any_project:
                await _class_projects(db, row, item, index)
                changed = True
            outcome.count(self.name, created, changed)
        await db.flush()


# In the order they are merged: a section after those it refers to (users name policies);
# priority classes name projects, so they come after them (config/__init__.py).
SECTIONS: tuple[Section, ...] = (Policies(), Users(), Aliases(), Images(), Presets())


async def _class_projects(db: AsyncSession, row: PriorityClassRow,
                          item: PriorityClassConfig, index: int) -> None:
    """``priorities.set_projects``, its refusal naming the document's entry."""
    try:
        await priorities.set_projects(db, row, item.projects, item.any_project)
    except InvalidRequest as err:
        raise InvalidRequest(f"priority_classes.{index}: {err.message}",
                             field=f"priority_classes.{index}.projects") from None


def _entries(rows: Iterable[R], build: Callable[[R], Any], label: Callable[[R], str],
             left_out: list[str]) -> list[Any]:
    """Each row as its document entry. A row that today's rules refuse (stored before a limit
    existed, e.g. an image name over 255 characters) is left out and named in ``left_out``:
    one odd row must not make the whole export fail, and the admin learns which to fix."""
    entries = []
    for row in rows:
        try:
            entries.append(build(row))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            left_out.append(f"{label(row)}: {where}: {first['msg']}")
            log.warning("config export left out %s: %s", label(row), first["msg"])
    return entries


def _limits(row: ResourcePolicyRow) -> dict[str, Any]:
    # the document carries user units; PolicyConfig parses them back into milli-units
    return {
        "max_sessions": row.max_sessions, "max_mem": row.max_mem,
        "max_gpu": None if row.max_gpu is None else str(fgpu_decimal(row.max_gpu)),
        "max_cpu": None if row.max_cpu is None else str(fgpu_decimal(row.max_cpu)),
        "max_priority": row.max_priority, "max_private_images": row.max_private_images,
        "max_storage": row.max_storage, "max_pending": row.max_pending,
        "idle": row.idle_rule, "max_lifetime": row.max_lifetime,
    }


async def _pairs(db: AsyncSession, key: Any, value: Any) -> dict[str, str]:
    rows = (await db.execute(select(key, value))).tuples().all()
    return dict(rows)


def _unique(items: Sequence[Any], section: str, key: Any) -> None:
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = key(item)
        if name in seen:
            raise InvalidRequest(f"{section}.{index}: {name!r} appears twice in {section}",
                                 field=f"{section}.{index}")
        seen.add(name)
