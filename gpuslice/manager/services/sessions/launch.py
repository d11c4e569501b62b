"""Creating and destroying sessions. Scheduling happens in the loop, never in the request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.limits import PRIORITY_BOUND
from gpuslice.common.schemas.sessions import FINAL, SessionCreate, SessionPublic, SessionStatus
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import new_id, utcnow
from gpuslice.manager.db.models import ProjectRow, ResourcePolicyRow, SessionRow, UserRow
from gpuslice.manager.errors import InvalidRequest, StaleStatus
from gpuslice.manager.scheduler import Quota, check_request
from gpuslice.manager.scheduler.reasons import QUEUED
from gpuslice.manager.services import priorities
from gpuslice.manager.services.images import app_catalog, catalog
from gpuslice.manager.services.lifecycle import note, record_created, transition
from gpuslice.manager.services.policies import quota_of
from gpuslice.manager.services.projects.launch import launch_project, project_quota
from gpuslice.manager.services.scheduling.snapshot import alive_nodes, asked_request
from gpuslice.manager.services.sessions.views import created_public, describe_many, visible
from gpuslice.manager.services.storage import mounts
from gpuslice.manager.services.timelimits.limits import (
    ENV_TIME_LIMIT,
    bounds_for,
    check_begin,
    time_limit_for,
)
from gpuslice.manager.settings import ManagerSettings, SessionSettings


async def create_sessions(
    db: AsyncSession, user: UserRow, body: SessionCreate, settings: ManagerSettings
) -> list[SessionPublic]:
    """Validate against the limits of one request, the image (alias, visibility, minimums),
    priority bound, cluster shape, quota, the user's PENDING limit, folders and apps; insert
    PENDING rows."""
    # One create at a time per user from here (a row lock on PostgreSQL, the write lock on
    # SQLite): the PENDING count cannot be passed by two creates racing.
    await db.execute(update(UserRow).where(UserRow.id == user.id).values(id=UserRow.id))
    checked = await check_create(db, user, body, settings)
    klass = await priorities.resolve(db, body.priority_class)
    now = utcnow()
    limit = time_limit_for(body, bounds_for(checked.project, settings.sessions))
    begin_at = check_begin(body.begin_at, now)
    env = body.env if limit is None else {**body.env, ENV_TIME_LIMIT: str(limit)}
    rows = [
        SessionRow(
            id=new_id(), name=_name(body, i), owner_id=user.id, image=checked.image,
            type=body.type, command=body.command, env=env, priority=body.priority,
            time_limit=limit, begin_at=begin_at,
            priority_class=klass.name if klass is not None else None,
            gpu=body.resources.gpu, cpu=body.resources.cpu, mem=body.resources.mem,
            gpu_mem=body.resources.gpu_mem, folders=checked.folders,
            project_id=checked.project.id, pool=checked.pool,
            gpu_model=body.gpu_model, status=SessionStatus.PENDING, status_reason=QUEUED,
            app_secret=app_catalog.new_secret(), start_apps=checked.start_apps or None,
            # one microsecond apart: the queue (and listings) keep the order they were asked in
            created_at=now + timedelta(microseconds=i), updated_at=now,
        )
        for i in range(body.count)
    ]
    db.add_all(rows)
    await db.flush()
    await record_created(db, rows, "created")
    await db.commit()
    return [created_public(row, user.username, checked.project.name) for row in rows]


@dataclass(slots=True)
class Checked:
    """What creating will use: the image reference to run, the folders to mount, the apps to
    start, the project it runs in and the resource group asked for (``ANY_GROUP``: any)."""

    image: str
    folders: list[dict[str, Any]]
    start_apps: list[str]
    project: ProjectRow
    pool: str


async def check_create(
    db: AsyncSession, user: UserRow, body: SessionCreate, settings: ManagerSettings
) -> Checked:
    """Everything ``create_sessions`` checks, without creating anything. Raises what creating
    would."""
    _check_size(body, settings.sessions)
    policy = await db.get(ResourcePolicyRow, user.policy_id) if user.policy_id else None
    await _check_pending(db, user, policy, body.count, settings.sessions.max_pending)
    _check_priority(user, policy, body.priority, settings.sessions.default_max_priority)
    project, pool = await launch_project(db, user, body.project, body.group)
    await priorities.resolve(db, body.priority_class, project, user)
    image = await catalog.resolve(
        db, user, body.image, body.resources.to_resources(), settings.sessions.allowed_images
    )
    await _check_feasible(db, body, quota_of(policy), settings, project, pool)
    # refused here, as in a preview: the project's maximum and the settings' both hold
    time_limit_for(body, bounds_for(project, settings.sessions))
    check_begin(body.begin_at, utcnow())
    start_apps = app_catalog.check_startable(image.meta, body.apps, image.reference)
    folders = await mounts.resolve(db, user, body.folders)
    return Checked(image.reference, folders, start_apps, project, pool)


async def destroy_sessions(
    db: AsyncSession, viewer: UserRow, ids: Sequence[str]
) -> list[SessionPublic]:
    """PENDING → CANCELLED at once; placed sessions → TERMINATING (their agent stops them).

    Final or already terminating sessions are left as they are, so destroying is idempotent.
    Ids the viewer may not see are ignored (and absent from the answer).
    """
    wanted = list(dict.fromkeys(ids))
    mine: list[str] = []
    for _attempt in range(3):
        rows = (
            await db.scalars(visible(select(SessionRow).where(SessionRow.id.in_(wanted)), viewer))
        ).all()
        mine = [row.id for row in rows]
        try:
            for row in rows:
                await _destroy_one(db, row, stop_reason(viewer, row))
            await db.commit()
            break
        except StaleStatus:  # the scheduler or the agent moved one meanwhile; look again
            viewer_id = viewer.id
            await db.rollback()
            db.expunge_all()
            # the rollback expired the viewer too: load it again (an expired, detached row
            # cannot be read)
            viewer = await db.get(UserRow, viewer_id) or viewer
    return await describe_many(db, [i for i in wanted if i in mine])


def stop_reason(viewer: UserRow, row: SessionRow) -> str:
    """Who stopped it, as its owner reads it later: "stopped by alice" for her own stop,
    "stopped by admin bob" when an admin stopped someone else's session."""
    if row.owner_id == viewer.id:
        return f"stopped by {viewer.username}"
    return f"stopped by admin {viewer.username}"


async def _destroy_one(db: AsyncSession, row: SessionRow, reason: str) -> None:
    status = SessionStatus(row.status)
    if status is SessionStatus.PENDING:
        await transition(db, row, SessionStatus.CANCELLED, reason)
    elif status is SessionStatus.TERMINATING and row.preempted_by is not None:
        # a preempted session stopped by its owner too: it ends, not back in the queue
        await note(db, row, reason, preempted_by=None)
    elif status not in FINAL and status is not SessionStatus.TERMINATING:
        await transition(db, row, SessionStatus.TERMINATING, reason)


def _check_size(body: SessionCreate, limits: SessionSettings) -> None:
    if body.count > limits.max_count:
        raise InvalidRequest(
            f"count: {body.count} is more than one request may create ({limits.max_count}, "
            "sessions.max_count)", field="count", code="too_many",
        )
    size = definition_bytes(body.command, body.env)
    if size > limits.max_definition:
        raise InvalidRequest(
            f"the command and environment are {size} bytes together; at most "
            f"{limits.max_definition} are allowed (sessions.max_definition)", field="env",
            code="too_large",
        )


def definition_bytes(command: Sequence[str] | None, env: dict[str, str]) -> int:
    """UTF-8 bytes of a session's command and environment (what each stored copy costs)."""
    return sum(len(a.encode()) for a in command or ()) + sum(
        len(k.encode()) + len(v.encode()) for k, v in env.items()
    )


async def _check_pending(
    db: AsyncSession, user: UserRow, policy: ResourcePolicyRow | None, count: int, default: int
) -> None:
    limit = policy.max_pending if policy is not None and policy.max_pending is not None else (
        default
    )
    waiting = await db.scalar(
        select(func.count()).select_from(SessionRow).where(
            SessionRow.owner_id == user.id, SessionRow.status == SessionStatus.PENDING
        )
    ) or 0
    if waiting + count > limit:
        raise InvalidRequest(
            f"{user.username} has {waiting} PENDING session(s) and may have at most {limit} "
            f"waiting at once; {count} more would pass that (destroy some, or wait for them "
            "to start)", field="count", code="quota_exceeded",
        )


def _check_priority(
    user: UserRow, policy: ResourcePolicyRow | None, priority: int, default_bound: int
) -> None:
    if user.role == Role.ADMIN:
        bound = PRIORITY_BOUND
    else:
        bound = policy.max_priority if policy is not None else default_bound
    if priority > bound:
        raise InvalidRequest(
            f"priority {priority} is above the highest your policy allows ({bound})",
            field="priority", code="priority_not_allowed",
        )


async def _check_feasible(
    db: AsyncSession, body: SessionCreate, quota: Quota, settings: ManagerSettings,
    project: ProjectRow, pool: str,
) -> None:
    nodes = await alive_nodes(db)
    req = asked_request(body, "new", "user", 0.0, project, pool, nodes)
    capacity, step = settings.nodes.device_capacity, settings.scheduler.step_milli
    impossible = check_request(req, nodes, Quota(), capacity, step)
    if impossible:
        raise InvalidRequest(impossible, field="resources", code="impossible_request")
    over_quota = check_request(req, nodes, quota, capacity, step, project_quota(project))
    if over_quota:
        raise InvalidRequest(over_quota, field="resources", code="quota_exceeded")


def _name(body: SessionCreate, i: int) -> str:
    if body.name is None:
        return f"{_image_stem(body.image)}-{new_id()[:8]}"
    return body.name if body.count == 1 else f"{body.name}-{i + 1}"


def _image_stem(image: str) -> str:
    stem = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0].lower()
    cleaned = "".join(c if c.isalnum() else "-" for c in stem).strip("-")[:40]
    return cleaned or "session"
