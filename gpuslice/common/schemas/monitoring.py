"""Monitoring: idle rules (in resource policies), a session's usage now and over time, the live
view of nodes and slices, and accounting per user and day.

Usage figures are per session, measured from the session's own processes (GPU) and cgroup (CPU,
memory). A figure nobody measured is ``null``: unknown, never zero. History points are
averages over a fixed step (60 s, or 3600 s for rolled-up data older than the minute retention)
and carry the time they cover; totals are exactly the sum of the points.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from gpuslice.common.schemas.common import Number
from gpuslice.common.schemas.sessions import ReclaimPublic, SessionStatus

MAX_SECONDS = 10 * 365 * 86400

__all__ = ["ReclaimPublic"]  # defined with the sessions that carry it


class IdleRule(BaseModel):
    """When a session counts as idle, and may be reclaimed (stopped, TERMINATED with the reason).

    Each criterion set is a resource the session is judged on; a session that lacks it (no GPU)
    is not judged on it, and batch sessions are never judged on terminal or app activity. A
    measurement that is missing is *unknown*, never idle: ``all`` needs every criterion known
    and idle for the whole window, ``any`` one of them.
    """

    window: int = Field(ge=1, le=MAX_SECONDS, description="Seconds a session must stay idle.")
    grace: int = Field(
        default=0, ge=0, le=MAX_SECONDS,
        description="Seconds after a session starts running before the rule applies.",
    )
    gpu_util: int | None = Field(
        default=None, ge=1, le=100,
        description="Idle while its GPU utilization (its own processes, percent of the device) "
        "is below this.",
    )
    cpu_util: int | None = Field(
        default=None, ge=1, le=100,
        description="Idle while it uses less than this percent of its CPU allocation.",
    )
    activity: bool = Field(
        default=False,
        description="Idle while nobody uses its terminal or apps (interactive sessions).",
    )
    combine: Literal["all", "any"] = Field(
        default="all", description="all (AND): every criterion idle; any (OR): one is enough."
    )

    @model_validator(mode="after")
    def _some_criterion(self) -> IdleRule:
        if self.gpu_util is None and self.cpu_util is None and not self.activity:
            raise ValueError(
                "idle rule: give at least one criterion (gpu_util, cpu_util or activity)"
            )
        return self


class GpuNow(BaseModel):
    """What a session's own processes use of one device now."""

    uuid: str
    mem_used: int | None = Field(description="Bytes (null: not measured).")
    utilization: int | None = Field(description="Percent of the device (null: not measured).")


class UsageNow(BaseModel):
    """A session's last sample."""

    at: datetime
    cpu: Number | None = Field(description="Cores busy (null: not measured yet).")
    mem: int = Field(description="Bytes of memory in use.")
    gpus: list[GpuNow] | None = Field(description="Per device; null: GPU not measured.")


class UsagePoint(BaseModel):
    """Averages over one step of a session's history (null: not measured in it)."""

    at: datetime = Field(description="Start of the step.")
    seconds: Number = Field(description="Seconds of the step covered by samples.")
    fgpu: Number = Field(description="fGPU held.")
    cpu: Number | None = Field(description="Cores busy.")
    mem: int | None = Field(description="Bytes of memory in use (KiB resolution).")
    mem_peak: int | None = Field(description="Highest sample, bytes.")
    gpu_mem: int | None = Field(description="Bytes of GPU memory its processes held.")
    gpu_mem_peak: int | None = Field(description="Highest sample, bytes.")
    gpu_util: Number | None = Field(description="GPU utilization of its processes, percent.")


class UsageTotals(BaseModel):
    """Sums over a session's whole history (or a user's day): exactly the sum of its points."""

    seconds: Number = Field(description="Seconds covered by samples.")
    fgpu_hours: Number
    cpu_hours: Number = Field(description="Core-hours used.")
    mem_gib_hours: Number = Field(description="GiB-hours of memory used.")
    gpu_mem_gib_hours: Number = Field(description="GiB-hours of GPU memory used.")
    gpu_util: Number | None = Field(description="Average GPU utilization, percent.")


class SessionStats(BaseModel):
    """A session's usage now, its totals and its history (kept after it ended)."""

    session_id: str
    name: str
    owner: str
    status: SessionStatus
    now: UsageNow | None = Field(description="The last sample (null: never measured).")
    totals: UsageTotals
    step: int = Field(description="Seconds per point.")
    since: datetime
    points: list[UsagePoint]
    reclaim: ReclaimPublic | None = None


class TopSlice(BaseModel):
    """A session on a node, with what it holds and what it uses now."""

    session_id: str
    name: str
    user: str
    status: SessionStatus
    fgpu: Number = Field(description="fGPU held on this device (or in all, for CPU-only rows).")
    gpu_mem: int | None = Field(description="Bytes of GPU memory its processes hold here.")
    gpu_util: int | None = Field(description="Percent of this device its processes use.")
    cpu: Number | None = Field(description="Cores busy.")
    cpu_alloc: Number = Field(description="Cores allocated.")
    mem: int | None = Field(description="Bytes of memory in use.")
    mem_alloc: int
    reclaim: ReclaimPublic | None = None


class TopDevice(BaseModel):
    index: int
    uuid: str
    model: str
    mem: int
    mem_used: int | None = Field(description="Bytes in use on the device, every process "
                                 "(admins).")
    utilization: int | None = Field(description="Percent busy, every process (admins).")
    capacity: Number = Field(description="fGPU.")
    used: Number | None = Field(description="fGPU allocated (admins).")
    slices: list[TopSlice]


class TopNode(BaseModel):
    id: str
    name: str
    status: str
    last_heartbeat_at: datetime | None
    cpu: Number
    cpu_used: Number | None = Field(description="Cores allocated (admins).")
    mem: int
    mem_used: int | None = Field(description="Bytes allocated (admins).")
    devices: list[TopDevice]
    cpu_only: list[TopSlice] = Field(description="Sessions on this node without a GPU slice.")


class Top(BaseModel):
    """Who holds which slice of which GPU, and how much of it they use (admins: every node;
    users: their own sessions, without other users' figures)."""

    at: datetime
    nodes: list[TopNode]


class UsageRow(BaseModel):
    """One user's (or, by project, one project's) usage on one UTC day."""

    user: str = Field(description="The user (by project: \"\").")
    project: str | None = Field(default=None, description="By project: the project.")
    day: date
    sessions: int = Field(description="Sessions measured that day.")
    totals: UsageTotals


class UsageReport(BaseModel):
    since: date
    until: date
    rows: list[UsageRow]
