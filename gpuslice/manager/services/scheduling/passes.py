"""The scheduling loop's pass: load the cluster, decide with the pure core, apply guarded.

load (one short read) → ``schedule()`` (pure, no transaction open) → the placements in batches,
each in one transaction through ``apply_placements`` (guarded; a lost race rolls the batch back,
then its placements go one by one through ``apply_placement``, so only those that lost roll
back, and another pass is asked for) → pending reasons and queue positions written only where
they changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import load_only

from gpuslice.common.resources import Resources
from gpuslice.common.schemas.projects import DEFAULT_GROUP
from gpuslice.common.schemas.sessions import HOLDING, SessionCreate, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    DeviceRow,
    NodeRow,
    ProjectRow,
    ResourcePolicyRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.errors import StaleStatus
from gpuslice.manager.events import Hub
from gpuslice.manager.scheduler import (
    Device,
    Node,
    PassResult,
    Policy,
    Request,
    SchedulerConfig,
    UserState,
)
from gpuslice.manager.scheduler.reasons import after_preemption
from gpuslice.manager.services import priorities
from gpuslice.manager.services.policies import quota_of
from gpuslice.manager.services.priorities import ClassRule
from gpuslice.manager.services.projects.launch import ANY_GROUP, project_states
from gpuslice.manager.services.scheduling import preemption
from gpuslice.manager.services.scheduling.allocation import (
    DeviceRef,
    DeviceRefs,
    PlacementLost,
    apply_placement,
    apply_placements,
)
from gpuslice.manager.services.timelimits.queue import attach_running, not_yet

log = logging.getLogger(__name__)
# Placements applied in one transaction. Bounded so that one batch's statements stay well
# within the databases' bound-parameter limits and a lost race costs little to redo.
BATCH = 200


@dataclass(slots=True)
class PassStats:
    placed: int = 0
    conflicts: int = 0
    waiting: int = 0

@dataclass(slots=True)
class Snapshot:
    nodes: list[Node]
    pending: dict[str, SessionRow]  # detached rows
    users: dict[str, UserState]
    devices: DeviceRefs
    projects: dict[str, UserState] = field(default_factory=dict)  # by name: those with quotas
    project_rows: dict[str, ProjectRow] = field(default_factory=dict)  # by id (detached)
    classes: dict[str, ClassRule] = field(default_factory=dict)  # priority classes by name
    # winners holding capacity whose victims were still stopping when this was read
    stopping: set[str] = field(default_factory=set)

    def requests(self) -> list[Request]:
        """The PENDING sessions as the core sees them, each with its project, groups and
        class."""
        alive = {n.pool for n in self.nodes}
        # one (pool, pools) per (group asked, project): shared by its requests, not rebuilt
        groups: dict[tuple[str, str | None], tuple[str, frozenset[str] | None]] = {}
        out = []
        for row in self.pending.values():
            project = self.project_rows.get(row.project_id or "")
            key = (row.pool, row.project_id)
            if key not in groups:
                groups[key] = request_groups(row.pool, project, alive)
            out.append(queued_request(row, project, groups[key], self.classes))
        return out


async def run_pass(
    sessionmaker: async_sessionmaker[AsyncSession], config: SchedulerConfig, hub: Hub
) -> PassStats:
    """One scheduling pass. Asks for another pass at once (``hub.scheduler``) after a lost race."""
    async with sessionmaker() as db:
        snap = await load_snapshot(db)
        if not snap.pending:
            return PassStats()
        now = utcnow()
        later = not_yet(snap.pending.values(), now)  # --begin: not in the queue yet
        requests = {r.id: r for r in snap.requests() if r.id not in later}
        if config.policy is Policy.BACKFILL and requests:
            await attach_running(db, snap.nodes, now)
            await db.commit()
        result = preemption.schedule_with_holds(
            list(requests.values()), snap.nodes, snap.users, config, now.timestamp(),
            preemption.holds_of(snap.pending), snap.projects,
        )
        stats = await _apply(db, snap, result)
        if result.waiting:
            # the cluster as this pass left it (read again only if it placed anything, and
            # only if some waiting session may preempt at all)
            nodes = alive_nodes if result.placements else None
            await preemption.preempt(db, result, snap, requests, nodes, config)
        result.waiting.update(later)
        await _write_waiting(db, snap, result)
    if stats.conflicts:
        hub.scheduler.set()
    return stats


async def load_snapshot(db: AsyncSession, *, nodes: bool = False) -> Snapshot:
    """Alive nodes with their used capacity, PENDING sessions, and users' quotas and usage.
    With nothing PENDING, no node is read unless ``nodes`` asks for them: an idle manager's
    passes (woken by every node that joins or changes) cost one indexed look."""
    queued = (
        await db.execute(
            select(SessionRow, UserRow.policy_id)
            .options(_QUEUED_COLUMNS)
            .join(UserRow, UserRow.id == SessionRow.owner_id)
            .where(SessionRow.status == SessionStatus.PENDING)
        )
    ).all()
    pending = [row for row, _policy in queued]
    # Before the nodes: on PostgreSQL each statement reads its own committed state, and a
    # victim seen stopping here has not released capacity the nodes' read could then show
    # free; one gone by here did release it before that read (a hold is dropped only when
    # its victims are gone and the capacity they freed was seen).
    stopping = await preemption.still_stopping(db, pending)
    alive, devices = await _alive(db) if pending or nodes else ([], {})
    # only owners with a policy have a quota to load (the usual case: none, no query)
    limited = {row.owner_id for row, policy in queued if policy is not None}
    users = await user_states(db, limited) if limited else {}
    project_ids = {row.project_id for row in pending if row.project_id is not None}
    projects, project_rows = await project_states(db, project_ids) if project_ids else ({}, {})
    classes = await priorities.rules(db) if pending else {}
    await db.commit()
    db.expunge_all()  # detached: a rollback later in the pass must not expire them
    return Snapshot(alive, {row.id: row for row in pending}, users, devices, projects,
                    project_rows, classes, stopping)


# What a pass reads of each PENDING session: what the core decides on, what placing it writes
# and what its waiting reason is compared with. Not its command, environment, folders or apps:
# decoding those (JSON) for the whole queue on every pass was a third of the pass's read.
_QUEUED_COLUMNS = load_only(
    SessionRow.id, SessionRow.name, SessionRow.owner_id, SessionRow.priority, SessionRow.pool,
    SessionRow.gpu, SessionRow.cpu, SessionRow.mem, SessionRow.gpu_model, SessionRow.gpu_mem,
    SessionRow.status, SessionRow.status_reason, SessionRow.wait_code,
    SessionRow.queue_position, SessionRow.node_id, SessionRow.created_at,
    SessionRow.project_id, SessionRow.time_limit, SessionRow.begin_at,
    SessionRow.priority_class, SessionRow.held_node_id, SessionRow.held_slices,
    SessionRow.preempt_reason, raiseload=True,
)


async def user_states(db: AsyncSession, owners: set[str]) -> dict[str, UserState]:
    """Each owner's quota and what their allocated sessions use (owners without a policy:
    absent, unlimited)."""
    policies = (
        await db.execute(
            select(UserRow.id, ResourcePolicyRow)
            .join(ResourcePolicyRow, UserRow.policy_id == ResourcePolicyRow.id)
            .where(UserRow.id.in_(owners))
        )
    ).all()
    if not policies:
        return {}
    usage = (
        await db.execute(
            select(
                SessionRow.owner_id, func.count(), func.sum(SessionRow.gpu),
                func.sum(SessionRow.cpu), func.sum(SessionRow.mem),
            )
            .where(SessionRow.status.in_(list(HOLDING)), SessionRow.owner_id.in_(owners))
            .group_by(SessionRow.owner_id)
        )
    ).all()
    used = {o: (n, Resources(int(g), int(c), int(m))) for o, n, g, c, m in usage}
    states: dict[str, UserState] = {}
    for user_id, p in policies:
        count, res = used.get(user_id, (0, Resources()))
        states[user_id] = UserState(quota_of(p), count, res)
    return states


async def alive_nodes(db: AsyncSession) -> list[Node]:
    """The schedulable nodes as the core sees them, with what is allocated on each.

    One read of plain rows (each node joined with its devices), no ORM objects: it runs on
    every create (the feasibility check) and every pass, and building a mapped object per
    device took half its time."""
    return (await _alive(db))[0]


async def _alive(db: AsyncSession) -> tuple[list[Node], DeviceRefs]:
    """``alive_nodes``, and their devices' rows for applying placements."""
    rows = await db.execute(
        select(
            NodeRow.id, NodeRow.name, NodeRow.cpu, NodeRow.mem, NodeRow.device_capacity,
            NodeRow.cpu_used, NodeRow.mem_used, NodeRow.pool,
            DeviceRow.id.label("device_id"), DeviceRow.index.label("device_index"),
            DeviceRow.uuid, DeviceRow.model, DeviceRow.mem.label("device_mem"), DeviceRow.sms,
            DeviceRow.used, DeviceRow.capacity,
        )
        .outerjoin(DeviceRow, DeviceRow.node_id == NodeRow.id)
        .where(NodeRow.status == "ALIVE")
        .order_by(NodeRow.id, DeviceRow.index)
    )
    nodes: dict[str, Node] = {}
    devices: DeviceRefs = {}
    for r in rows:
        node = nodes.get(r.id)
        if node is None:
            node = nodes[r.id] = Node(
                r.id, r.name, r.cpu, r.mem, [], r.device_capacity, r.cpu_used, r.mem_used,
                r.pool,
            )
        if r.device_index is not None:  # a node without devices (CPU only): one row, all NULL
            node.devices.append(
                Device(r.device_index, r.uuid, r.model, r.device_mem, r.sms, r.used)
            )
            devices[(r.id, r.device_index)] = DeviceRef(r.device_id, r.uuid, r.model, r.capacity)
    return list(nodes.values()), devices


def queued_request(
    row: SessionRow, project: ProjectRow | None = None,
    groups: tuple[str, frozenset[str] | None] | None = None,
    classes: Mapping[str, ClassRule] | None = None,
) -> Request:
    """A PENDING session as the scheduler core sees it. ``groups``: its (pool, pools) from
    ``request_groups`` (default: the group it asked for, any meaning "default"); its class's
    rank (``classes``: the priority classes by name) orders it first, then its own priority."""
    rule = (classes or {}).get(row.priority_class or "")
    priority = preemption.ranked(rule.rank if rule is not None else 0, row.priority)
    return session_request(
        row.id, row.owner_id, row.created_at.timestamp(), Resources(row.gpu, row.cpu, row.mem),
        gpu_mem=row.gpu_mem, priority=priority, gpu_model=row.gpu_model,
        groups=groups or request_groups(row.pool, project, set()),
        project=None if project is None else project.name, time_limit=row.time_limit,
    )


def asked_request(
    body: SessionCreate, request_id: str, user: str, enqueued_at: float,
    project: ProjectRow | None = None, pool: str | None = None, nodes: list[Node] | None = None,
) -> Request:
    """A session being created (``body``) as the scheduler core would see it queued: for the
    check that it can ever fit, and the preview. ``pool``: the group asked for (``ANY_GROUP``:
    any the project may use, among those of ``nodes``)."""
    groups = request_groups(
        body.group or ANY_GROUP if pool is None else pool, project,
        {n.pool for n in nodes or ()},
    )
    return session_request(
        request_id, user, enqueued_at, body.resources.to_resources(),
        gpu_mem=body.resources.gpu_mem, priority=body.priority, gpu_model=body.gpu_model,
        groups=groups, project=None if project is None else project.name,
        time_limit=body.time_limit,
    )


def request_groups(
    pool: str, project: ProjectRow | None, alive: set[str]
) -> tuple[str, frozenset[str] | None]:
    """(``Request.pool``, ``Request.pools``) of a session that asked for ``pool`` (``ANY_GROUP``:
    any its project may use: the project's groups, or those of the alive nodes)."""
    if pool != ANY_GROUP:
        return pool, None
    allowed = project.groups if project is not None and project.groups is not None else alive
    groups = sorted(allowed) or [DEFAULT_GROUP]
    if len(groups) == 1:
        return groups[0], None
    return ",".join(groups), frozenset(groups)  # the queue these requests share


def session_request(
    request_id: str, user: str, enqueued_at: float, resources: Resources, *,
    gpu_mem: int | None, priority: int, gpu_model: str | None,
    groups: tuple[str, frozenset[str] | None] = (DEFAULT_GROUP, None),
    project: str | None = None, time_limit: int | None = None,
) -> Request:
    """The one way a session's request for the scheduler core is built, queued or asked."""
    pool, pools = groups
    return Request(request_id, user, resources, enqueued_at, priority, gpu_model, pool,
                   gpu_mem=gpu_mem or 0, project=project, pools=pools, time_limit=time_limit)


async def _apply(db: AsyncSession, snap: Snapshot, result: PassResult) -> PassStats:
    """Placements in batches of ``BATCH``, each one transaction (a commit, and one wake-up of
    each node's long-poll, per batch rather than per placement). A batch that loses a race
    anywhere is rolled back whole and its placements applied one by one, so only those that
    really lost are lost."""
    stats = PassStats(waiting=len(result.waiting))
    names = {n.id: n.name for n in snap.nodes}
    placed = [(p, snap.pending[p.request_id]) for p in result.placements]
    for start in range(0, len(placed), BATCH):
        batch = placed[start:start + BATCH]
        if len(batch) > 1:  # (one placement alone goes the simpler way below)
            try:
                await apply_placements(db, batch, names, snap.devices)
                await db.commit()
                stats.placed += len(batch)
                continue
            except (PlacementLost, StaleStatus, DBAPIError) as exc:
                await db.rollback()
                log.info("a batch of %d placements lost a race (%s); placing them one by one",
                         len(batch), exc)
        for placement, row in batch:
            try:
                await apply_placement(
                    db, placement, row, names[placement.node_id], snap.devices
                )
                await db.commit()
                stats.placed += 1
            except (PlacementLost, StaleStatus, DBAPIError) as exc:
                # DBAPIError: a deadlock or check-constraint refusal on PostgreSQL; same meaning.
                await db.rollback()
                stats.conflicts += 1
                log.info("placement of %s lost a race: %s", row.id, exc)
    return stats


async def _write_waiting(db: AsyncSession, snap: Snapshot, result: PassResult) -> None:
    said = {
        w.request_id: after_preemption(snap.pending[w.request_id].preempt_reason, w.reason)
        for w in result.waiting.values()
    }
    changes = [
        {"sid": w.request_id, "reason": said[w.request_id], "code": str(w.code),
         "pos": w.position or None}
        for w in result.waiting.values()
        if _changed(snap.pending[w.request_id], said[w.request_id], str(w.code),
                    w.position or None)
    ]
    if not changes:
        return
    await db.execute(
        update(cast(Table, SessionRow.__table__))
        .where(SessionRow.id == bindparam("sid"), SessionRow.status == SessionStatus.PENDING)
        .values(
            status_reason=bindparam("reason"), wait_code=bindparam("code"),
            queue_position=bindparam("pos"),
        ),
        changes,
    )
    await db.commit()


def _changed(row: SessionRow, reason: str, code: str, position: int | None) -> bool:
    return (row.status_reason, row.wait_code, row.queue_position) != (reason, code, position)

