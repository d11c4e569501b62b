"""What each node must run, delivered by long-poll as soon as it changes.

Every change to a node's desired state bumps ``nodes.assignment_version`` in the same transaction
(see ``lifecycle.transition`` and ``channel``). An agent asks with the version it has; the answer
comes at once if the version moved, else when this process's hub signals the node (a change
committed here, or one made by another replica that ``versions.VersionWatch`` saw: one query a
second for all nodes, not one per parked long-poll), else at the wait limit. Each
answer carries the node's new requests (``channel.deliver``: each in one answer only), unless
the agent that asked has gone: a killed agent's long-poll stays parked here until it notices,
and a request handed to it would be lost while its successor polls beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from gpuslice.common import text
from gpuslice.common.images import ImageMeta
from gpuslice.common.resources import slice_fraction, sm_percent
from gpuslice.common.schemas.agents import (
    GRACE_VAR,
    Assignment,
    Assignments,
    FolderMount,
    SliceAssignment,
)
from gpuslice.common.schemas.common import ExactResources
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus, SessionType
from gpuslice.common.waits import wait_event
from gpuslice.manager.db.models import AllocationRow, NodeRow, SessionRow, UserRow
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.events import Hub
from gpuslice.manager.services import channel, priorities
from gpuslice.manager.services.images import app_catalog
from gpuslice.manager.services.images.reports import pulls_for, removals_for
from gpuslice.manager.services.lifecycle import transition
from gpuslice.manager.services.storage import mounts

log = logging.getLogger(__name__)
UNSENDABLE = (
    "its stored command or environment is not valid Unicode text, so it cannot be sent to a "
    "node; create it again"
)


# Built once: an answer runs these on every change of a node's sessions and at the end of every
# long-poll that waited in vain, and building a statement (and its cache key) each time cost
# about a quarter of the answer's CPU.
_VERSION = select(NodeRow.assignment_version, NodeRow.rescan).where(
    NodeRow.id == bindparam("node"))
_HOLDING = (
    select(SessionRow, UserRow.username)
    .join(UserRow, UserRow.id == SessionRow.owner_id)
    .where(SessionRow.node_id == bindparam("node"), SessionRow.status.in_(list(HOLDING)))
    .options(selectinload(SessionRow.allocations))
    .order_by(SessionRow.created_at, SessionRow.id)
)


async def long_poll(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    node_id: str,
    since: int | None,
    wait: float,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> Assignments:
    """The node's assignments once they differ from version ``since`` (at once without one),
    or at the end of ``wait`` seconds. ``gone`` tells whether the asking agent has hung up: its
    answer then carries no requests (they wait for the agent's next long-poll)."""
    deadline = time.monotonic() + wait
    while True:
        changed = hub.node(node_id).listen()
        answer = await _answer_if_due(sessionmaker, hub, node_id, since, deadline, gone)
        if answer is not None:
            return answer
        # Nothing of the database session is held while waiting (a thousand agents wait).
        await wait_event(changed, deadline - time.monotonic())


async def _answer_if_due(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    node_id: str,
    since: int | None,
    deadline: float,
    gone: Callable[[], Awaitable[bool]] | None,
) -> Assignments | None:
    async with sessionmaker() as db:
        version, rescan = (await db.execute(_VERSION, {"node": node_id})).one_or_none() or (
            None, None)
        hung_up = gone is not None and await gone()
        if not (since is None or version != since or deadline <= time.monotonic()
                or hub.closing.is_set() or hung_up):
            return None
        answer, unsendable = await _build(
            db, node_id, version or 0, rescan or 0, deliver=not hung_up
        )
        await _end(db, unsendable)
        return answer


async def _build(
    db: AsyncSession, node_id: str, version: int, rescan: int, deliver: bool
) -> tuple[Assignments, list[SessionRow]]:
    """The answer, and the sessions left out of it because they cannot be sent (see _end)."""
    rows = (await db.execute(_HOLDING, {"node": node_id})).all()
    pulls = await pulls_for(db, node_id, {row.image for row, _owner in rows})
    sendable = [(row, owner) for row, owner in rows if _sendable(row, owner)]
    metas = {image: await app_catalog.image_meta(db, image)
             for image in {row.image for row, _owner in sendable if row.start_apps}}
    folders = await mounts.assignment_mounts(db, [row for row, _owner in sendable])
    graces = {name: rule.grace_s for name, rule in (await priorities.rules(db)).items()}
    answer = Assignments(
        node_id=node_id, version=version,
        sessions=[_assignment(row, owner, row.image in pulls, metas, folders.get(row.id, []),
                              graces.get(row.priority_class or ""))
                  for row, owner in sendable],
        requests=await channel.deliver(db, node_id) if deliver else [],
        remove_images=await removals_for(db, node_id),
        rescan=rescan,
    )
    await db.commit()  # the requests count as delivered from here on
    return answer, [row for row, owner in rows if (row, owner) not in sendable]


def _sendable(row: SessionRow, owner: str) -> bool:
    # Stored before the API's edge checked text (or by a bug): what cannot be encoded cannot
    # reach a node, and one such row must not stop the node's every other session.
    return text.encodable([row.name, row.image, owner, row.command, row.env])


async def _end(db: AsyncSession, unsendable: list[SessionRow]) -> None:
    """End the sessions that cannot be sent, saying why (their node will never run them)."""
    for row in unsendable:
        log.error("session %s cannot be sent to its node (its stored text is not valid "
                  "Unicode); ending it", row.id)
        try:
            await transition(db, row, SessionStatus.ERROR, UNSENDABLE)
            await db.commit()
        except (StaleStatus, IllegalTransition):  # it moved meanwhile; the next poll looks again
            await db.rollback()


def _assignment(
    row: SessionRow, owner: str, pull: bool, metas: dict[str, ImageMeta],
    folders: list[FolderMount], grace_s: int | None = None,
) -> Assignment:
    """``grace_s``: its priority class's grace between SIGTERM and SIGKILL, told to the
    session too (``GPUSLICE_PREEMPT_GRACE_S``) so a script knows how long it has to
    checkpoint; ``None``: the agent's own (no class)."""
    status = SessionStatus(row.status)
    apps = []
    if row.start_apps and row.app_secret and row.image in metas:  # to start once it runs
        apps = app_catalog.launches(row.id, row.app_secret, metas[row.image], row.start_apps)
    return Assignment(
        session_id=row.id, name=row.name, owner=owner, image=row.image,
        type=SessionType(row.type), command=row.command, status=status,
        env=row.env if grace_s is None else {**row.env, GRACE_VAR: str(grace_s)},
        stop_grace_s=grace_s, requeued=row.preemptions or 0,
        desired="stopped" if status is SessionStatus.TERMINATING else "running",
        resources=ExactResources(gpu=row.gpu, cpu=row.cpu, mem=row.mem),
        slices=[_slice(a) for a in row.allocations if a.released_at is None],
        pull=pull, apps=apps, mounts=folders,
    )


def _slice(a: AllocationRow) -> SliceAssignment:
    return SliceAssignment(
        device_index=a.device_index, device_uuid=a.device_uuid, gpu=a.gpu,
        capacity=a.device_capacity, fraction=slice_fraction(a.gpu, a.device_capacity),
        mem=a.mem, sms=a.sms, sm_percent=sm_percent(a.gpu, a.device_capacity),
    )
