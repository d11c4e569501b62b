"""``/metrics``: the cluster as Prometheus sees it (prometheus-client's text format).

Everything but this manager's own timings is read from the database at scrape time, in a few
queries, so every manager replica answers the same. Per device, DCGM exporter names
(``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``/``_FREE`` in MiB, labels ``gpu``, ``UUID``,
``modelName``, ``Hostname``); per session, ``gpuslice_session_*`` with ``session``,
``session_name``, ``user``, ``node`` (and ``gpu``: the device UUID); the control plane as
``gpuslice_*``; this replica's background loops as ``gpuslice_loop_*`` (label ``loop``). A
figure nobody measured is left out (no sample), never written as 0.

Scrapes are authenticated unless ``monitoring.public_metrics``: the scrape token
(``monitoring.scrape_token``) or an admin's API token as a bearer token.
"""

from __future__ import annotations

import hmac
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import SecretStr
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.common.schemas.sessions import HOLDING, SessionStatus
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import (
    AllocationRow,
    BackupRow,
    DeviceRow,
    NodeRow,
    SessionRow,
    UsageSeriesRow,
    UserRow,
)
from gpuslice.manager.errors import Forbidden, Unauthorized
from gpuslice.manager.loops import Loop
from gpuslice.manager.services import auth
from gpuslice.manager.settings import MonitoringSettings

MiB = 1024**2
_SESSION = ["session", "session_name", "user", "node"]
_DEVICE = ["gpu", "UUID", "device", "modelName", "Hostname", "node"]


class ManagerMetrics:
    """This manager process's own measurements, kept in a registry of its own (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.scheduling = Histogram(
            "gpuslice_scheduling_pass_seconds", "Duration of this manager's scheduling passes.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.heartbeat_store = Histogram(
            "gpuslice_heartbeat_store_seconds",
            "Time this manager took to store one heartbeat's samples.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=self.registry,
        )
        self.loops: Mapping[str, Loop] = {}  # this replica's, set by the app's lifespan
        self.registry.register(_LoopCollector(self))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape shows, as plain rows (no ORM objects: a scrape reads thousands)."""

    now: datetime
    nodes: Sequence[Any]  # id, name, pool, status, last heartbeat, cpu(+used), mem(+used), usage
    devices: Sequence[Any]  # node_id, index, uuid, model, mem, capacity, used
    sessions: Sequence[Any]  # id, name, cpu, mem, owner, node name, now: cpu, mem, gpus
    slices: Sequence[Any]  # session_id, device_uuid, gpu, mem
    statuses: Sequence[Any]  # (status, count)
    queue: Sequence[Any]  # (wait code, count, oldest created_at)
    last_backup: datetime | None = None  # the newest `admin backup` that completed


async def check_scraper(
    db: AsyncSession, token: str | None, scrape_token: SecretStr | None, public: bool
) -> None:
    """Let the scrape through, or raise ``Unauthorized`` / ``Forbidden``."""
    if public:
        return
    if not token:
        raise Unauthorized("send `Authorization: Bearer <scrape token or an admin's API token>`")
    if scrape_token is not None and hmac.compare_digest(
        token.encode(), scrape_token.get_secret_value().encode()
    ):
        return
    user, _token = await auth.authenticate(db, token)
    await db.commit()
    if user.role != Role.ADMIN:
        raise Forbidden("metrics are for admins and the scrape token")


async def scrape(
    db: AsyncSession, token: str | None, settings: MonitoringSettings, own: ManagerMetrics
) -> bytes:
    """The whole ``/metrics`` answer for a caller with ``token`` (checked first)."""
    await check_scraper(db, token, settings.scrape_token, settings.public_metrics)
    return render(await snapshot(db, utcnow()), own)


async def snapshot(db: AsyncSession, now: datetime) -> Snapshot:
    """Everything ``/metrics`` shows, read in a few queries."""
    holding = SessionRow.status.in_(list(HOLDING))
    nodes = (await db.execute(
        select(NodeRow.id, NodeRow.name, NodeRow.pool, NodeRow.status,
               NodeRow.last_heartbeat_at, NodeRow.cpu, NodeRow.cpu_used, NodeRow.mem,
               NodeRow.mem_used, NodeRow.usage).order_by(NodeRow.name)
    )).all()
    devices = (await db.execute(
        select(DeviceRow.node_id, DeviceRow.index, DeviceRow.uuid, DeviceRow.model,
               DeviceRow.mem, DeviceRow.capacity, DeviceRow.used)
        .order_by(DeviceRow.node_id, DeviceRow.index)
    )).all()
    sessions = (await db.execute(
        select(SessionRow.id, SessionRow.name, SessionRow.cpu, SessionRow.mem, UserRow.username,
               NodeRow.name, UsageSeriesRow.cpu, UsageSeriesRow.mem, UsageSeriesRow.gpus)
        .join(UserRow, UserRow.id == SessionRow.owner_id)
        .join(NodeRow, NodeRow.id == SessionRow.node_id)
        .outerjoin(UsageSeriesRow, UsageSeriesRow.session_id == SessionRow.id)
        .where(holding)
    )).all()
    slices = (await db.execute(
        select(AllocationRow.session_id, AllocationRow.device_uuid, AllocationRow.gpu,
               AllocationRow.mem)
        .join(SessionRow, SessionRow.id == AllocationRow.session_id)
        .where(holding, AllocationRow.released_at.is_(None))
    )).all()
    statuses = (await db.execute(
        select(SessionRow.status, func.count()).group_by(SessionRow.status)
    )).all()
    queue = (await db.execute(
        select(SessionRow.wait_code, func.count(), func.min(SessionRow.created_at))
        .where(SessionRow.status == SessionStatus.PENDING).group_by(SessionRow.wait_code)
    )).all()
    last_backup = await db.scalar(select(func.max(BackupRow.finished_at)))
    await db.commit()
    return Snapshot(now, nodes, devices, sessions, slices, statuses, queue, last_backup)


def render(snap: Snapshot, own: ManagerMetrics) -> bytes:
    """The text exposition: the snapshot, then this manager's own histograms."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snap))
    return generate_latest(registry) + generate_latest(own.registry)


class _Collector(Collector):
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        yield from _devices(self.snap)
        yield from _sessions(self.snap)
        yield from _control_plane(self.snap)


class _LoopCollector(Collector):
    """Each loop's health as it is at the scrape."""

    def __init__(self, metrics: ManagerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        healthy = _gauge("gpuslice_loop_healthy", "1 while this manager's loop goes round and "
                         "has not failed 3 passes in a row, else 0.", ["loop"])
        passes = CounterMetricFamily("gpuslice_loop_passes", "Passes of this manager's loop "
                                     "that succeeded.", labels=["loop"])
        failures = _gauge("gpuslice_loop_consecutive_failures", "Passes of this manager's loop "
                          "that failed in a row (0: its last pass succeeded).", ["loop"])
        since = _gauge("gpuslice_loop_seconds_since_pass", "Seconds since a pass of this "
                       "manager's loop began or ended.", ["loop"])
        now = time.monotonic()
        for key, loop in self.metrics.loops.items():
            state = loop.state
            healthy.add_metric([key], state.problem(now) is None)
            passes.add_metric([key], state.passes)
            failures.add_metric([key], state.failures)
            since.add_metric([key], now - state.beat)
        yield from (healthy, passes, failures, since)


def device_readings(node_usage: Mapping[str, Any] | None) -> dict[int, tuple[Any, Any]]:
    """``{device index: (bytes used, percent busy)}`` from a node's last heartbeat (its
    ``usage`` column); absent when not reported."""
    devices = (node_usage or {}).get("devices") or {}
    return {int(i): (r.get("mem_used"), r.get("utilization")) for i, r in devices.items()
            if isinstance(r, dict)}


def _gauge(name: str, doc: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels, unit=unit)


def _devices(snap: Snapshot) -> Iterator[Metric]:
    util = _gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %), every process.", _DEVICE)
    used = _gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", _DEVICE)
    free = _gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _DEVICE)
    cap = _gauge("gpuslice_device_fgpu_capacity", "fGPU of the device.", _DEVICE)
    alloc = _gauge("gpuslice_device_fgpu_allocated", "fGPU allocated on the device.", _DEVICE)
    alive = {n.id: n for n in snap.nodes if n.status == "ALIVE"}
    readings = {n.id: device_readings(n.usage) for n in alive.values()}
    for d in snap.devices:
        node = alive.get(d.node_id)
        if node is None:
            continue
        labels = [str(d.index), d.uuid, f"nvidia{d.index}", d.model, node.name, node.name]
        cap.add_metric(labels, d.capacity / 1000)
        alloc.add_metric(labels, d.used / 1000)
        mem_used, utilization = readings[d.node_id].get(d.index, (None, None))
        if utilization is not None:
            util.add_metric(labels, utilization)
        if mem_used is not None:
            used.add_metric(labels, mem_used // MiB)
            free.add_metric(labels, max(0, d.mem - mem_used) // MiB)
    yield from (util, used, free, cap, alloc)


def _sessions(snap: Snapshot) -> Iterator[Metric]:
    gpu_labels = [*_SESSION, "gpu"]
    fgpu = _gauge("gpuslice_session_fgpu", "fGPU the session holds on the device.", gpu_labels)
    limit = _gauge("gpuslice_session_gpu_memory_limit_bytes",
                   "GPU memory of the session's slice.", gpu_labels)
    gpu_mem = _gauge("gpuslice_session_gpu_memory_bytes",
                     "GPU memory held by the session's own processes.", gpu_labels)
    gpu_util = _gauge("gpuslice_session_gpu_utilization",
                      "Percent of the device's SMs the session's own processes use.", gpu_labels)
    cpu = _gauge("gpuslice_session_cpu_cores", "Cores the session uses.", _SESSION)
    cpu_alloc = _gauge("gpuslice_session_cpu_limit_cores", "Cores allocated.", _SESSION)
    mem = _gauge("gpuslice_session_memory_bytes", "Memory the session uses.", _SESSION)
    mem_alloc = _gauge("gpuslice_session_memory_limit_bytes", "Memory allocated.", _SESSION)
    held: dict[str, list[Any]] = defaultdict(list)
    for piece in snap.slices:
        held[piece.session_id].append(piece)
    for sid, name, cpu_limit, mem_limit, username, node_name, cpu_now, mem_now, gpus in \
            snap.sessions:
        labels = [sid, name, username, node_name]
        cpu_alloc.add_metric(labels, cpu_limit / 1000)
        mem_alloc.add_metric(labels, mem_limit)
        measured = {g["uuid"]: g for g in gpus or []}
        for piece in held.get(sid, ()):
            device = [*labels, piece.device_uuid]
            fgpu.add_metric(device, piece.gpu / 1000)
            limit.add_metric(device, piece.mem)
            figures = measured.get(piece.device_uuid, {})
            if figures.get("mem_used") is not None:
                gpu_mem.add_metric(device, figures["mem_used"])
            if figures.get("utilization") is not None:
                gpu_util.add_metric(device, figures["utilization"])
        if mem_now is not None:  # measured at least once
            mem.add_metric(labels, mem_now)
        if cpu_now is not None:
            cpu.add_metric(labels, cpu_now / 1000)
    yield from (fgpu, limit, gpu_mem, gpu_util, cpu, cpu_alloc, mem, mem_alloc)


def _control_plane(snap: Snapshot) -> Iterator[Metric]:
    statuses = _gauge("gpuslice_sessions", "Sessions by status.", ["status"])
    counts = dict(snap.statuses)
    for status in SessionStatus:
        statuses.add_metric([status.value], counts.get(status.value, 0))
    length = _gauge("gpuslice_queue_length", "PENDING sessions by wait reason code.", ["reason"])
    oldest = _gauge("gpuslice_queue_oldest_wait_seconds",
                    "How long the oldest PENDING session of each reason has waited.", ["reason"])
    for code, count, created in snap.queue:
        reason = code or "not_evaluated"
        length.add_metric([reason], count)
        oldest.add_metric([reason], max(0.0, (snap.now - created).total_seconds()))
    yield from (statuses, length, oldest)
    if snap.last_backup is not None:  # never backed up: no sample (unknown), not 0
        backup = _gauge("gpuslice_backup_last_success_timestamp_seconds",
                        "Unix time the last `gpuslice admin backup` of this platform completed.",
                        [])
        backup.add_metric([], snap.last_backup.timestamp())
        yield backup
    yield from _nodes(snap)


def _nodes(snap: Snapshot) -> Iterator[Metric]:
    age = _gauge("gpuslice_node_heartbeat_age_seconds", "Seconds since the node's last "
                 "heartbeat.", ["node", "pool"])
    up = _gauge("gpuslice_node_up", "1 while the node is ALIVE, 0 when LOST or REVOKED.",
                ["node", "pool"])
    # Alerts need a lost node told from one an admin revoked on purpose (both are not up).
    status = _gauge("gpuslice_node_status", "1 for the node's status (ALIVE, LOST, REVOKED), "
                    "0 for the others.", ["node", "pool", "status"])
    ratio = _gauge("gpuslice_pool_allocation_ratio",
                   "Allocated share of the pool's alive capacity.", ["pool", "resource"])
    pools: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
    gpus: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for d in snap.devices:
        gpus[d.node_id][0] += d.used
        gpus[d.node_id][1] += d.capacity
    for node in snap.nodes:
        up.add_metric([node.name, node.pool], 1 if node.status == "ALIVE" else 0)
        for value in NodeStatus:
            status.add_metric([node.name, node.pool, value.value],
                              1 if node.status == value.value else 0)
        if node.last_heartbeat_at is not None:
            age.add_metric([node.name, node.pool],
                           max(0.0, (snap.now - node.last_heartbeat_at).total_seconds()))
        if node.status == "ALIVE":
            totals = pools[node.pool]
            for i, value in enumerate((*gpus[node.id], node.cpu_used, node.cpu,
                                       node.mem_used, node.mem)):
                totals[i] += value
    for pool, (gpu_used, gpu, cpu_used, cpu, mem_used, mem) in sorted(pools.items()):
        for resource, used_, total in (("gpu", gpu_used, gpu), ("cpu", cpu_used, cpu),
                                       ("mem", mem_used, mem)):
            if total:
                ratio.add_metric([pool, resource], used_ / total)
    yield from (age, up, status, ratio)


__all__ = ["ManagerMetrics", "Snapshot", "check_scraper", "render", "scrape", "snapshot"]
