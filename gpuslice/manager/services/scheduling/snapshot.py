"""What a scheduling pass reads: the cluster and the queue, and the sessions as the scheduler
core sees them.

``load_snapshot`` is the pass's one short read (alive nodes with what is allocated on each, the
PENDING sessions, the quotas and usage of their users and projects, the priority classes and the
preemption winners whose victims still stop), detached, so that no transaction stays open while
the pure core decides. The requests the core takes are built here alone (``session_request``),
for queued sessions and for a session being created (its feasibility check and the preview).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only

from gpuslice.common.resources import Resources
from gpuslice.common.schemas.projects import DEFAULT_GROUP
from gpuslice.common.schemas.sessions import HOLDING, SessionCreate, SessionStatus
from gpuslice.manager.db.models import (
    DeviceRow,
    NodeRow,
    ProjectRow,
    ResourcePolicyRow,
    SessionRow,
    UserRow,
)
from gpuslice.manager.scheduler import Device, Node, Request, UserState
from gpuslice.manager.scheduler.holds import Hold
from gpuslice.manager.scheduler.preemption import ranked
from gpuslice.manager.services import priorities
from gpuslice.manager.services.policies import quota_of
from gpuslice.manager.services.priorities import ClassRule
from gpuslice.manager.services.projects.launch import ANY_GROUP, project_states
from gpuslice.manager.services.scheduling.allocation import DeviceRef, DeviceRefs


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
    stopping = await still_stopping(db, pending)
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
    priority = ranked(rule.rank if rule is not None else 0, row.priority)
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


def holds_of(pending: Mapping[str, SessionRow]) -> dict[str, Hold]:
    """The holds of the PENDING sessions (winners whose victims are stopping)."""
    return {
        row.id: Hold(row.held_node_id, Resources(0, row.cpu, row.mem),
                     tuple((int(i), int(g)) for i, g in row.held_slices or ()))
        for row in pending.values() if row.held_node_id is not None
    }


async def still_stopping(db: AsyncSession, pending: Sequence[SessionRow]) -> set[str]:
    """Of the PENDING winners holding capacity, those with a victim still stopping, read with
    them (one consistent view: a victim's requeue releases its capacity in the same
    transaction)."""
    holders = [row.id for row in pending if row.held_node_id is not None]
    if not holders:
        return set()
    found = await db.scalars(
        select(SessionRow.preempted_by).distinct()
        .where(SessionRow.preempted_by.in_(holders),
               SessionRow.status == SessionStatus.TERMINATING)
    )
    return {winner for winner in found if winner is not None}
