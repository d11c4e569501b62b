from __future__ import annotations

from fastapi import APIRouter, status

from gpuslice.common.schemas.nodes import (
    JoinTokenCreate,
    JoinTokenCreated,
    JoinTokenPublic,
    NodePublic,
)
from gpuslice.manager.api.deps import AdminUser, DbDep, SessionmakerDep
from gpuslice.manager.services.nodes import registration, views

router = APIRouter(tags=["nodes"])


@router.get("/nodes")
async def list_nodes(db: DbDep, _admin: AdminUser) -> list[NodePublic]:
    """Nodes with their devices, capacity and what is allocated (admins only)."""
    return await views.list_nodes(db)


@router.post("/nodes/{node_id}/revoke")
async def revoke_node(
    node_id: str, sessionmaker: SessionmakerDep, _admin: AdminUser
) -> NodePublic:
    """Revoke a node: its credential is refused from now on and its sessions end (ERROR, "node
    revoked by an admin"); a re-key join token (`rekey`, bound to its name) brings it back
    (admins only)."""
    return await registration.revoke_node(sessionmaker, node_id)


@router.post("/join-tokens", status_code=status.HTTP_201_CREATED)
async def create_join_token(
    body: JoinTokenCreate, db: DbDep, admin: AdminUser
) -> JoinTokenCreated:
    """A single-use token an agent registers one node with, valid `expires_in_hours` (1 by
    default), optionally only for the node named `node`; with `rekey` it may replace that
    existing node's credential. The secret is shown only here (admins only)."""
    return await registration.create_join_token(db, admin, body)


@router.get("/join-tokens")
async def list_join_tokens(db: DbDep, _admin: AdminUser) -> list[JoinTokenPublic]:
    """Join tokens not revoked, with their status: active, used or expired (admins only)."""
    return await registration.list_join_tokens(db)


@router.delete("/join-tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_join_token(token_id: str, db: DbDep, _admin: AdminUser) -> None:
    """Revoke an active join token; nodes registered with it keep their credentials (admins
    only). 409 `token_used` or `token_expired`: it admits no node any more."""
    await registration.revoke_join_token(db, token_id)
