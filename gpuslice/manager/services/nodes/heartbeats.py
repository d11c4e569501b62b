"""Heartbeats: what a node has (capacity, devices, images) and uses; they keep it ALIVE."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import cast

from sqlalchemy import Table, bindparam, case, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.logs import bind
from gpuslice.common.schemas.agents import Heartbeat, HeartbeatAck, NodeStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import DeviceRow, NodeRow
from gpuslice.manager.events import wake_after_commit
from gpuslice.manager.security import token_digest
from gpuslice.manager.services.images import reports as image_reports
from gpuslice.manager.services.monitoring import samples
from gpuslice.manager.services.nodes.instances import check_agent
from gpuslice.manager.services.nodes.registration import authenticate_node

log = logging.getLogger(__name__)


async def heartbeat(
    db: AsyncSession, credential: str, body: Heartbeat, *, max_gap_ms: int = 30_000,
    timed: Callable[[float], None] | None = None, live_s: float = 15.0,
) -> HeartbeatAck:
    """Record capacity, devices, images and usage of the node whose ``credential`` this is; a
    LOST node that reports in is ALIVE again.

    The samples go to monitoring's history (``max_gap_ms``: the longest a sample may stand
    for; ``timed`` is told how long storing them took). A heartbeat of another agent than
    the node's live one (a heartbeat within ``live_s``) is refused (``instances.py``).

    The usual heartbeat (an ALIVE node reporting what it reported last, readings aside) is one
    UPDATE found by the credential's digest: no row is read. Any other is applied in full.

    A heartbeat with ``engine_error`` (the node's Docker Engine does not answer) keeps the node
    ALIVE and records why, but changes nothing it does not know: images, usage, capacity.
    Its sessions are not lost: a live-restore engine keeps them running meanwhile, and the
    agent re-adopts them (or reports how they ended) once the engine answers again.
    """
    digest = report_digest(body)
    if body.engine_error is None:
        found = await _same_report(db, token_digest(credential), body, digest)
        if found is not None:
            node_id, version = found
            bind(node_id=node_id)  # what this request logs names the node
            return await _store_samples(db, node_id, body, version, max_gap_ms, timed)
    node = await authenticate_node(db, credential)
    bind(node_id=node.id)
    check_agent(node, body.agent_id, live_s)
    agent = {"agent_id": body.agent_id} if body.agent_id is not None else {}
    node_id = node.id  # read now: storing the samples may roll back (and expire ``node``)
    if node.engine_error != body.engine_error:
        _log_engine(node.name, body.engine_error)
    if body.engine_error is not None:
        await db.execute(
            update(NodeRow).where(NodeRow.id == node_id).values(
                status=NodeStatus.ALIVE, last_heartbeat_at=utcnow(),
                engine_error=body.engine_error, **agent,
            )
        )
        return await _ack(db, node_id)
    came_back = node.status != NodeStatus.ALIVE
    changed = came_back or (node.cpu, node.mem) != (body.cpu, body.mem)
    version, cpu, mem = (await db.execute(
        update(NodeRow)
        .where(NodeRow.id == node.id)
        .values(
            # Never below what is allocated: the check constraint holds, sessions drain first.
            cpu=case((NodeRow.cpu_used > body.cpu, NodeRow.cpu_used), else_=body.cpu),
            mem=case((NodeRow.mem_used > body.mem, NodeRow.mem_used), else_=body.mem),
            images=sorted(set(body.images)), usage=_usage(body), status=NodeStatus.ALIVE,
            last_heartbeat_at=utcnow(), engine_error=None, report_digest=None, **agent,
        )
        .returning(NodeRow.assignment_version, NodeRow.cpu, NodeRow.mem)
    )).one()
    devices_changed, devices_settled = await _sync_devices(db, node, body)
    changed = devices_changed or changed
    await image_reports.sync_node(db, node_id, body)
    if devices_settled and (cpu, mem) == (body.cpu, body.mem):
        # All of it applied: the same report next time is one UPDATE (``_same_report``).
        await db.execute(update(NodeRow).where(NodeRow.id == node_id)
                         .values(report_digest=digest))
    if changed:
        wake_after_commit(db, "scheduler")
    await db.commit()
    if came_back:
        log.warning("node %s is back (it reports %d running)", node.name, len(body.running))
    return await _store_samples(db, node_id, body, version, max_gap_ms, timed)


def report_digest(body: Heartbeat) -> str:
    """What a heartbeat says beside its readings: capacity, devices, images (any change of
    them, and only that, changes the digest)."""
    # The agent's id too: another agent's heartbeat is applied in full (and checked) first.
    static = body.model_dump(mode="json", include={"cpu", "mem", "images", "image_details",
                                                   "agent_id"})
    static["devices"] = [d.model_dump(mode="json", exclude={"mem_used", "utilization"})
                         for d in body.devices]
    raw = json.dumps(static, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()


_NODES = cast(Table, NodeRow.__table__)
# Built once: the usual heartbeat's statement costs no building or cache key each time.
_SAME_REPORT = (
    update(_NODES)
    .where(_NODES.c.credential_hash == bindparam("hash"), _NODES.c.revoked_at.is_(None),
           _NODES.c.status == NodeStatus.ALIVE, _NODES.c.report_digest == bindparam("digest"),
           _NODES.c.engine_error.is_(None))
    .values(usage=bindparam("new_usage", type_=_NODES.c.usage.type),
            last_heartbeat_at=bindparam("now", type_=_NODES.c.last_heartbeat_at.type))
    .returning(_NODES.c.id, _NODES.c.assignment_version)
)


async def _same_report(
    db: AsyncSession, credential_hash: str, body: Heartbeat, digest: str
) -> tuple[str, int] | None:
    """The heartbeat of an ALIVE node reporting what it reported last (the usual one): its
    readings and time, in one UPDATE guarded by all it assumes; the node's id and assignment
    version. None (nothing written) for anything else: an unknown or revoked credential, a
    node the sweep called LOST, one whose report changed or was not all applied."""
    if db.get_bind().dialect.name == "postgresql":
        # One statement that either applies whole or not at all: no BEGIN and COMMIT round
        # trips around it (the connection goes back to the pool, isolation reset, at commit).
        connection = await db.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
    else:
        connection = await db.connection()
    found = (await connection.execute(_SAME_REPORT, {
        "hash": credential_hash, "digest": digest, "new_usage": _usage(body), "now": utcnow(),
    })).first()
    await db.commit()
    return (found[0], found[1]) if found is not None else None


async def _store_samples(
    db: AsyncSession, node_id: str, body: Heartbeat, version: int, max_gap_ms: int,
    timed: Callable[[float], None] | None,
) -> HeartbeatAck:
    started = time.perf_counter()
    await samples.store(db, node_id, body.usage, utcnow(), max_gap_ms)
    if timed is not None:
        timed(time.perf_counter() - started)
    # The version as of this heartbeat's commit: a later change wakes the node's long-poll.
    return HeartbeatAck(node_id=node_id, status=NodeStatus.ALIVE, assignment_version=version or 0)


async def _ack(db: AsyncSession, node_id: str) -> HeartbeatAck:
    await db.commit()
    version = await db.scalar(select(NodeRow.assignment_version).where(NodeRow.id == node_id))
    await db.commit()
    return HeartbeatAck(node_id=node_id, status=NodeStatus.ALIVE, assignment_version=version or 0)


def _log_engine(node: str, problem: str | None) -> None:
    if problem is None:
        log.warning("node %s: its Docker Engine answers again", node)
    else:
        log.warning("node %s: its Docker Engine does not answer (%s); its sessions wait for it",
                    node, problem)


async def _sync_devices(
    db: AsyncSession, node: NodeRow, body: Heartbeat
) -> tuple[bool, bool]:
    """Whether the devices changed, and whether all of the report is applied."""
    current = {
        d.index: d
        for d in (
            await db.scalars(select(DeviceRow).where(DeviceRow.node_id == node.id))
        ).all()
    }
    changed = False
    for dev in body.devices:
        row = current.pop(dev.index, None)
        if row is None:
            db.add(
                DeviceRow(
                    node_id=node.id, index=dev.index, uuid=dev.uuid, model=dev.model, mem=dev.mem,
                    sms=dev.sms, capacity=node.device_capacity, used=0,
                )
            )
            changed = True
        elif (row.uuid, row.model, row.mem, row.sms) != (dev.uuid, dev.model, dev.mem, dev.sms):
            row.uuid, row.model, row.mem, row.sms = dev.uuid, dev.model, dev.mem, dev.sms
            changed = True
    settled = True
    if current:  # devices gone from the node: drop those nothing is allocated on
        gone = [d.id for d in current.values()]
        dropped = await db.execute(
            delete(DeviceRow).where(DeviceRow.id.in_(gone), DeviceRow.used == 0)
            .returning(DeviceRow.id)
        )
        settled = len(dropped.all()) == len(gone)  # (the others: at a later heartbeat)
        changed = True
    await db.flush()
    return changed, settled


def _usage(body: Heartbeat) -> dict[str, dict[str, dict[str, int | None]]]:
    # Device readings (every process on the device) for /metrics and `gpuslice top`, on the
    # row every heartbeat rewrites anyway; per-session figures go to monitoring's series.
    return {
        "devices": {str(d.index): {"mem_used": d.mem_used, "utilization": d.utilization}
                    for d in body.devices},
        "sessions": {u.session_id: {"cpu": u.cpu, "mem": u.mem} for u in body.usage},
    }
