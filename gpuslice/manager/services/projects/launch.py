"""A session's project and resource groups when it is created, and projects' quotas and usage
for the scheduling pass."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import Resources
from gpuslice.common.schemas.sessions import HOLDING
from gpuslice.manager.db.models import AllocationRow, ProjectRow, SessionRow, UserRow
from gpuslice.manager.errors import NotFound
from gpuslice.manager.scheduler import Quota, UserState
from gpuslice.manager.services.projects.service import get_project, personal_project, usage_of

# SessionRow.pool of a session that asked for no group: any its project may use.
ANY_GROUP = ""


async def launch_project(
    db: AsyncSession, user: UserRow, name: str | None, group: str | None
) -> tuple[ProjectRow, str]:
    """The project a session of ``user`` runs in (their personal one unless ``name``) and the
    group it asks for (``ANY_GROUP``: any the project may use). A project the user is not a
    member of is "no project", as for one that does not exist; a group the project may not use
    is refused naming the ones it may."""
    project = await personal_project(db, user) if name is None else (
        await get_project(db, user, name)
    )
    if project.personal_of not in (None, user.id):  # an admin sees it, but it is not theirs
        raise NotFound(f"no project {name}", field="project")
    if group is not None and project.groups is not None and group not in project.groups:
        raise NotFound(
            f"project {project.name} may not use resource group '{group}'; it may use "
            f"{', '.join(project.groups)}", field="group",
        )
    return project, ANY_GROUP if group is None else group


def project_quota(row: ProjectRow) -> Quota | None:
    """The project's quota as the scheduler core takes it (None: no limit at all)."""
    models = tuple(sorted((k.casefold(), v) for k, v in (row.max_gpu_models or {}).items()))
    limits = (row.max_sessions, row.max_gpu, row.max_cpu, row.max_mem)
    if not models and all(v is None for v in limits):
        return None
    return Quota(*limits, gpu_models=models)


async def project_states(
    db: AsyncSession, project_ids: Iterable[str]
) -> tuple[dict[str, UserState], dict[str, ProjectRow]]:
    """The quota and usage of those of ``project_ids`` that have a quota, by project name, and
    every one of them by id (for their names and groups)."""
    rows = (await db.scalars(select(ProjectRow).where(ProjectRow.id.in_(list(project_ids))))
            ).all()
    by_id = {r.id: r for r in rows}
    limited = {r.id: q for r in rows if (q := project_quota(r)) is not None}
    used = await usage_of(db, limited) if limited else {}
    by_model = [pid for pid, q in limited.items() if q.gpu_models]
    models = await _model_usage(db, by_model) if by_model else {}
    states = {}
    for pid, quota in limited.items():
        count, res = used.get(pid, (0, Resources()))
        held = {part: sum(gpu for model, gpu in models.get(pid, {}).items()
                          if part in model.casefold()) for part, _ in quota.gpu_models}
        states[by_id[pid].name] = UserState(quota, count, res, held)
    return states, by_id


async def _model_usage(db: AsyncSession, project_ids: list[str]) -> dict[str, dict[str, int]]:
    """Milli-fGPU each project's allocated sessions hold per GPU model."""
    rows = (await db.execute(
        select(SessionRow.project_id, AllocationRow.device_model, func.sum(AllocationRow.gpu))
        .join(AllocationRow, AllocationRow.session_id == SessionRow.id)
        .where(SessionRow.status.in_(list(HOLDING)), SessionRow.project_id.in_(project_ids),
               AllocationRow.released_at.is_(None))
        .group_by(SessionRow.project_id, AllocationRow.device_model)
    )).all()
    out: dict[str, dict[str, int]] = {}
    for pid, model, gpu in rows:
        out.setdefault(pid, {})[model] = int(gpu)
    return out
