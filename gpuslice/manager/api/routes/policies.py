from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.users import PolicyCreate, PolicyPublic, PolicyUpdate
from gpuslice.manager.api.deps import AdminUser, DbDep
from gpuslice.manager.services import policies

router = APIRouter(prefix="/policies", tags=["policies"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_policy(body: PolicyCreate, db: DbDep, _admin: AdminUser) -> PolicyPublic:
    """Create a resource policy (quota) to attach to users (admins only)."""
    return await policies.create_policy(db, body)


@router.get("")
async def list_policies(db: DbDep, _admin: AdminUser) -> list[PolicyPublic]:
    """All resource policies (admins only)."""
    return await policies.list_policies(db)


@router.put("/{policy_id}")
async def update_policy(
    policy_id: str, body: PolicyUpdate, db: DbDep, _admin: AdminUser
) -> PolicyPublic:
    """Replace a policy's limits; running sessions keep running (admins only)."""
    return await policies.update_policy(db, policy_id, body)


@router.delete("/{policy_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_policy(policy_id: str, db: DbDep, _admin: AdminUser) -> None:
    """Delete a policy no user has (admins only)."""
    await policies.delete_policy(db, policy_id)
