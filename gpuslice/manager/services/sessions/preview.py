"""What creating a request would do now, without creating it (the console's launch dialog).

The same checks as creating (``launch.check_create``, so the same errors), then one scheduling
pass of the pure core on the cluster as it is (alive nodes, the PENDING queue, quotas) with the
request's sessions added at the back of the queue, as new ones would be. Nothing is written, and
the answer holds counts and a reason only: no other user's sessions or names.
"""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.sessions import GpuModelShape, SessionCreate, SessionPreview
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.scheduler import Node
from gpuslice.manager.scheduler.holds import schedule_with_holds
from gpuslice.manager.scheduler.preemption import ranked
from gpuslice.manager.services import priorities
from gpuslice.manager.services.projects.launch import project_states
from gpuslice.manager.services.scheduling.snapshot import (
    asked_request,
    holds_of,
    load_snapshot,
    user_states,
)
from gpuslice.manager.services.sessions.launch import check_create
from gpuslice.manager.settings import ManagerSettings

_PREFIX = "preview-"


async def preview(
    db: AsyncSession, user: UserRow, body: SessionCreate, settings: ManagerSettings
) -> SessionPreview:
    """How many of ``body``'s sessions would start now and how many would queue (and why)."""
    checked = await check_create(db, user, body, settings)
    user_id, project = user.id, checked.project
    snap = await load_snapshot(db, nodes=True)  # the cluster even with no queue
    users = dict(snap.users)
    if user_id not in users:
        users.update(await user_states(db, {user_id}))
    projects = dict(snap.projects)
    if project.name not in projects:
        projects.update((await project_states(db, {project.id}))[0])
    await db.commit()
    now = time.time()
    classes = snap.classes or await priorities.rules(db)
    klass = await priorities.resolve(db, body.priority_class)
    rule = classes.get(klass.name) if klass is not None else None
    mine = [replace(r, priority=ranked(rule.rank if rule else 0, r.priority))
            for r in (asked_request(body, f"{_PREFIX}{i}", user_id, now + i * 1e-6, project,
                                    checked.pool, snap.nodes)
                      for i in range(body.count))]
    if not snap.classes:  # no queue: the snapshot read no classes
        snap.classes = classes
    queue = snap.requests() + mine
    result = schedule_with_holds(queue, snap.nodes, users, settings.scheduler.core_config(),
                                 now, holds_of(snap.pending), projects)
    placed = {p.request_id for p in result.placements}
    fits = sum(1 for r in mine if r.id in placed)
    first = next((result.waiting[r.id] for r in mine if r.id in result.waiting), None)
    return SessionPreview(
        fits_now=fits, will_queue=body.count - fits,
        reason=first.reason if first else None,
        queue_position=first.position if first else None,
        fgpu_step=settings.scheduler.fgpu_step,
        fgpu_per_gpu=_ratios(snap.nodes, settings.nodes.device_capacity),
        max_gpu=fgpu_decimal(max((len(n.devices) * n.device_capacity for n in snap.nodes),
                                 default=0)),
        largest_free=fgpu_decimal(max(
            (n.device_capacity - d.used for n in snap.nodes for d in n.devices), default=0)),
        gpu_models=_models(snap.nodes),
    )


def _ratios(nodes: list[Node], default: int) -> list[Decimal]:
    found = sorted({n.device_capacity for n in nodes if n.devices}) or [default]
    return [fgpu_decimal(c) for c in found]


def _models(nodes: list[Node]) -> list[GpuModelShape]:
    """Each distinct (model, memory, SMs, fGPU per GPU) once: what a slice of it is worth.
    Hardware only, never who uses it, so every user may see it."""
    found = {(d.model, d.mem, d.sms, n.device_capacity) for n in nodes for d in n.devices}
    return [GpuModelShape(model=m, mem=mem, sms=sms, fgpu_per_gpu=fgpu_decimal(cap))
            for m, mem, sms, cap in sorted(found)]
