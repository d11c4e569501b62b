"""Health for load balancers and service managers: no authentication, nothing written."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import text

from gpuslice.common.schemas.health import Liveness, LoopsHealth, Readiness
from gpuslice.manager.api.deps import DbDep, LoopsDep, SchemaHeadDep, SessionmakerDep
from gpuslice.manager.services import health as service

router = APIRouter(prefix="/health", tags=["health"])


@router.get("")
async def health(db: DbDep) -> dict[str, str]:
    """Liveness and database reachability in one (kept for existing probes)."""
    await db.execute(text("SELECT 1"))
    await db.commit()
    return {"status": "ok"}


@router.get("/live")
async def live() -> Liveness:
    """The process answers. A service manager restarts the manager only when this fails."""
    return Liveness()


@router.get("/ready", responses={503: {"model": Readiness}})
async def ready(
    response: Response, sessionmaker: SessionmakerDep, head: SchemaHeadDep, loops: LoopsDep
) -> Readiness:
    """Whether this replica should get traffic: database reachable, migrations at head,
    scheduler and node sweep loops alive. 503 with the failing checks otherwise."""
    answer = await service.readiness(sessionmaker, head, loops)
    if answer.status != "ready":
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return answer


@router.get("/loops")
async def loops(loops: LoopsDep) -> LoopsHealth:
    """Every background loop of this replica: its last pass, its failures in a row, the type
    of its last error, and whether it is healthy (a loop stuck for 3 intervals, or failing 3
    passes in a row, is not). 200 either way: readiness is `/ready`."""
    return service.loops_health(loops)
