"""Resource policies: per-user limits on what allocated sessions hold together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.monitoring import IdleRule
from gpuslice.common.schemas.users import PolicyCreate, PolicyPublic, PolicyUpdate
from gpuslice.manager.db.models import ResourcePolicyRow, UserRow
from gpuslice.manager.errors import Conflict, NotFound
from gpuslice.manager.scheduler import Quota


async def create_policy(db: AsyncSession, body: PolicyCreate) -> PolicyPublic:
    row = ResourcePolicyRow(**columns(body))
    db.add(row)
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"policy {body.name!r} already exists", field="name") from None
    return public(row)


async def list_policies(db: AsyncSession) -> list[PolicyPublic]:
    rows = await db.scalars(select(ResourcePolicyRow).order_by(ResourcePolicyRow.name))
    return [public(p) for p in rows]


async def update_policy(db: AsyncSession, policy_id: str, body: PolicyUpdate) -> PolicyPublic:
    row = await _get(db, policy_id)
    for key, value in columns(body).items():
        setattr(row, key, value)
    await db.commit()
    return public(row)


async def delete_policy(db: AsyncSession, policy_id: str) -> None:
    row = await _get(db, policy_id)
    users = await db.scalar(select(func.count()).where(UserRow.policy_id == policy_id))
    if users:
        raise Conflict(f"policy {row.name!r} is attached to {users} user(s); detach it first")
    await db.delete(row)
    await db.commit()


def quota_of(policy: ResourcePolicyRow | None) -> Quota:
    if policy is None:
        return Quota()
    return Quota(policy.max_sessions, policy.max_gpu, policy.max_cpu, policy.max_mem)


def public(row: ResourcePolicyRow) -> PolicyPublic:
    return PolicyPublic(
        id=row.id, name=row.name, max_sessions=row.max_sessions,
        max_gpu=None if row.max_gpu is None else fgpu_decimal(row.max_gpu),
        max_cpu=None if row.max_cpu is None else fgpu_decimal(row.max_cpu),
        max_mem=row.max_mem, max_priority=row.max_priority,
        max_private_images=row.max_private_images, max_storage=row.max_storage,
        max_pending=row.max_pending,
        idle=IdleRule.model_validate(row.idle_rule) if row.idle_rule else None,
        max_lifetime=row.max_lifetime, created_at=row.created_at,
    )


def columns(body: PolicyCreate | PolicyUpdate) -> dict[str, Any]:
    """A policy's limits as its row's columns (the idle rule as JSON)."""
    values = body.model_dump(exclude={"idle"})
    values["idle_rule"] = body.idle.model_dump() if body.idle is not None else None
    return values


async def _get(db: AsyncSession, policy_id: str) -> ResourcePolicyRow:
    row = await db.get(ResourcePolicyRow, policy_id)
    if row is None:
        raise NotFound(f"no resource policy {policy_id}")
    return row
