from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.agents import (
    JoinTokenCreate,
    JoinTokenCreated,
    JoinTokenPublic,
    NodePublic,
)
from gpuslice.manager.api.deps import AdminUser, DbDep
from gpuslice.manager.services.nodes import registration, views

router = APIRouter(tags=["nodes"])


@router.get("/nodes")
async def list_nodes(db: DbDep, _admin: AdminUser) -> list[NodePublic]:
    """Nodes with their devices, capacity and what is allocated (admins only)."""
    return await views.list_nodes(db)


@router.post("/join-tokens", status_code=status.HTTP_201_CREATED)
async def create_join_token(
    body: JoinTokenCreate, db: DbDep, admin: AdminUser
) -> JoinTokenCreated:
    """A token an agent registers its node with; the secret is shown only here (admins only)."""
    return await registration.create_join_token(db, admin, body)


@router.get("/join-tokens")
async def list_join_tokens(db: DbDep, _admin: AdminUser) -> list[JoinTokenPublic]:
    """Active join tokens (admins only)."""
    return await registration.list_join_tokens(db)


@router.delete("/join-tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_join_token(token_id: str, db: DbDep, _admin: AdminUser) -> None:
    """Revoke a join token; nodes registered with it keep their credentials (admins only)."""
    await registration.revoke_join_token(db, token_id)
