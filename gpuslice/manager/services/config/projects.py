"""The configuration's projects (admins' ones, with members) and nodes' resource groups."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.config import ConfigDocument, NodeGroupConfig, ProjectConfig
from gpuslice.common.schemas.projects import IdpGroups
from gpuslice.manager.db.models import NodeRow, ProjectMemberRow, ProjectRow, UserRow
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.config.sections import Outcome, _apply, _entries, _pairs, _unique
from gpuslice.manager.services.projects import idp_links as links


class Projects:
    """Admins' projects (personal ones follow their users); members by username."""

    name = "projects"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        names = await _pairs(db, UserRow.id, UserRow.username)
        members: dict[str, list[str]] = {}
        for pid, uid in (await db.execute(select(
                ProjectMemberRow.project_id, ProjectMemberRow.user_id))).tuples():
            members.setdefault(pid, []).append(names.get(uid, uid))
        rows = list(await db.scalars(select(ProjectRow).where(ProjectRow.personal_of.is_(None))
                                     .order_by(ProjectRow.name)))
        linked = {r.id: await links.links_of(db, r.id) for r in rows}
        return _entries(rows, lambda r: ProjectConfig.model_validate(
            _quotas(r) | {"name": r.name, "description": r.description,
                          "members": sorted(members.get(r.id, [])), "idp_groups": linked[r.id]}),
            lambda r: f"projects: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.projects, "projects", lambda p: p.name)
        users = await _pairs(db, UserRow.username, UserRow.id)
        for index, item in enumerate(doc.projects):
            unknown = [m for m in item.members if m not in users]
            if unknown:
                raise InvalidRequest(f"projects.{index}.members: no user named {unknown[0]!r}",
                                     field=f"projects.{index}.members")
            values = item.model_dump(exclude={"name", "members", "idp_groups"})
            if values["groups"] is not None:
                values["groups"] = sorted(set(values["groups"]))
            row = await db.scalar(select(ProjectRow).where(ProjectRow.name == item.name))
            created = row is None
            if row is None:
                row = ProjectRow(name=item.name, **values)
                db.add(row)
                await db.flush()
            changed = not created and _apply(row, values)
            changed = await _members(db, row.id, {users[m] for m in item.members}) or changed
            if item.idp_groups is not None:
                changed = await _links(db, row, item.idp_groups) or changed
            outcome.count(self.name, created, changed)
        await db.flush()


class NodeGroups:
    """Each node's resource group, by node name."""

    name = "groups"

    async def export(self, db: AsyncSession, *, password_hashes: bool,
                     left_out: list[str]) -> list[Any]:
        rows = await db.scalars(select(NodeRow).order_by(NodeRow.name))
        return _entries(rows, lambda r: NodeGroupConfig(node=r.name, group=r.pool),
                        lambda r: f"groups: {r.name!r}", left_out)

    async def merge(self, db: AsyncSession, doc: ConfigDocument, outcome: Outcome) -> None:
        _unique(doc.groups, "groups", lambda g: g.node)
        missing = []
        for item in doc.groups:
            row = await db.scalar(select(NodeRow).where(NodeRow.name == item.node))
            if row is None:  # it joins later: its agent's --resource-group decides then
                missing.append(item.node)
                continue
            outcome.count(self.name, False, _apply(row, {"pool": item.group}))
        if missing:
            outcome.notes.append(f"{len(missing)} node(s) of groups are not on this manager "
                                 f"(yet): {', '.join(missing[:10])}")
        await db.flush()


async def _members(db: AsyncSession, project_id: str, wanted: set[str]) -> bool:
    """Make the project's members exactly ``wanted``; whether anything changed."""
    have = set((await db.scalars(select(ProjectMemberRow.user_id).where(
        ProjectMemberRow.project_id == project_id))).all())
    for user_id in wanted - have:
        db.add(ProjectMemberRow(project_id=project_id, user_id=user_id))
    if have - wanted:
        await db.execute(delete(ProjectMemberRow).where(
            ProjectMemberRow.project_id == project_id,
            ProjectMemberRow.user_id.in_(have - wanted)))
    return wanted != have


async def _links(db: AsyncSession, row: ProjectRow, wanted: list[IdpGroups]) -> bool:
    """Make the project's links exactly ``wanted``; whether anything changed."""
    have: dict[str, list[str]] = {
        link.provider: sorted(link.groups) for link in await links.links_of(db, row.id)}
    want: dict[str, list[str]] = {
        link.provider: sorted(set(link.groups)) for link in wanted if link.groups}
    for provider in links.PROVIDERS:
        if have.get(provider, []) != want.get(provider, []):
            await links.replace(db, row, provider, want.get(provider, []))
    return have != want


def _quotas(row: ProjectRow) -> dict[str, Any]:
    # the document carries user units; ProjectConfig parses them back into milli-units
    def units(value: int | None) -> str | None:
        return None if value is None else str(fgpu_decimal(value))

    return {
        "max_sessions": row.max_sessions, "max_gpu": units(row.max_gpu),
        "max_cpu": units(row.max_cpu), "max_mem": row.max_mem, "max_storage": row.max_storage,
        "max_gpu_models": None if row.max_gpu_models is None else {
            k: units(v) for k, v in row.max_gpu_models.items()},
        "groups": row.groups, "default_time_limit": row.default_time_limit,
        "max_time_limit": row.max_time_limit,
    }
