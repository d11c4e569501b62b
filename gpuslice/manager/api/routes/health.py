from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from gpuslice.manager.api.deps import DbDep

router = APIRouter(tags=["health"])


@router.get("/health")
async def health(db: DbDep) -> dict[str, str]:
    """Liveness and database reachability; no authentication."""
    await db.execute(text("SELECT 1"))
    await db.commit()
    return {"status": "ok"}
