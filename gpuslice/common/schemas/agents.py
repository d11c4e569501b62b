"""Node agents: joining, heartbeats, assignments (desired state down) and state reports (up).

An agent authenticates every call after registration with `Authorization: Bearer <credential>`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from gpuslice.common.schemas.common import Number, ResourcesPublic
from gpuslice.common.schemas.images import ImageCreate, ImagePublic  # noqa: F401 (moved there)
from gpuslice.common.schemas.sessions import SessionStatus, SessionType


class NodeStatus(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"


class JoinTokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    expires_in_hours: int | None = Field(default=24, ge=1, le=24 * 3650)


class JoinTokenPublic(BaseModel):
    id: str
    name: str
    created_at: datetime
    expires_at: datetime | None


class JoinTokenCreated(JoinTokenPublic):
    token: str = Field(description="The secret; it is shown only in this answer.")


class DeviceReport(BaseModel):
    index: int = Field(ge=0, le=1023)
    uuid: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=128)
    mem: int = Field(ge=0, description="Device memory in bytes.")
    sms: int = Field(default=0, ge=0)
    mem_used: int = Field(default=0, ge=0, description="Bytes in use (as measured).")
    utilization: float = Field(default=0, ge=0, le=100, description="Percent busy (measured).")


class NodeRegister(BaseModel):
    join_token: str = Field(min_length=1, max_length=256)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    pool: str = Field(default="default", min_length=1, max_length=64)
    fgpu_per_gpu: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None, description="Override the manager's default fGPU per GPU for this node."
    )


class NodeRegistered(BaseModel):
    node_id: str
    credential: str = Field(description="The agent's secret for every later call; shown once.")
    heartbeat_interval: float = Field(description="Seconds between heartbeats the manager wants.")


class ImageReport(BaseModel):
    """One tagged image on a node: its tag, Docker image id, size and its own labels."""

    tag: str = Field(min_length=1, max_length=255)
    image_id: str | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0, description="Bytes.")
    labels: dict[str, str] = Field(default_factory=dict)


class Heartbeat(BaseModel):
    """What a node has and runs now. Sent every `heartbeat_interval` seconds."""

    cpu: int = Field(gt=0, description="Allocatable CPU in milli-cores.")
    mem: int = Field(gt=0, description="Allocatable memory in bytes.")
    devices: list[DeviceReport] = Field(default_factory=list, max_length=1024)
    images: list[str] = Field(default_factory=list, max_length=10_000)
    image_details: list[ImageReport] | None = Field(
        default=None, max_length=10_000,
        description="The same images with id, size and labels (agents that know them send them).",
    )
    running: list[str] = Field(
        default_factory=list, description="Session ids with a container on this node now."
    )
    usage: dict[str, float] = Field(default_factory=dict, description="Free-form gauges.")

    @model_validator(mode="after")
    def _unique_devices(self) -> Heartbeat:
        indexes = [d.index for d in self.devices]
        if len(indexes) != len(set(indexes)):
            raise ValueError("devices: each index must appear once")
        return self


class HeartbeatAck(BaseModel):
    node_id: str
    status: NodeStatus
    assignment_version: int


class SliceAssignment(BaseModel):
    device_index: int
    device_uuid: str
    gpu: Number = Field(description="fGPU of the slice.")
    fraction: Number
    mem: int
    sms: int
    capacity: Number | None = Field(
        default=None, description="fGPU of the whole device (the node's fGPU per GPU)."
    )


class Assignment(BaseModel):
    """A session the node must run (or stop: `desired` is `stopped` when it is TERMINATING)."""

    session_id: str
    name: str
    owner: str
    image: str
    type: SessionType
    command: list[str] | None
    env: dict[str, str]
    status: SessionStatus
    desired: str = Field(description="`running` or `stopped`.")
    resources: ResourcesPublic
    slices: list[SliceAssignment]
    pull: bool = Field(
        default=False,
        description="The image is in the registry and this node lacks it: pull it, reporting "
        "progress as PREPARING reasons.",
    )


class ExecRequest(BaseModel):
    """The manager wants a command run in a session: answer with `PUT …/exec/{id}`."""

    id: str
    session_id: str
    command: list[str]
    timeout: float


class ExecUpload(BaseModel):
    """What a command run in a session printed, and how it ended."""

    exit_code: int
    stdout: str = Field(default="", max_length=4 * 1024 * 1024)
    stderr: str = Field(default="", max_length=4 * 1024 * 1024)
    error: str = Field(default="", max_length=2000, description="Why it could not run at all.")


class CommitRequest(BaseModel):
    """The manager wants a session's container committed as ``reference`` (``repo:tag``), with
    ``labels`` added to its image's own: answer with ``PUT …/commits/{id}``."""

    id: str
    session_id: str
    reference: str
    labels: dict[str, str]


class CommitUpload(BaseModel):
    """The committed image (its id, size and labels), or why the commit failed."""

    image_id: str | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    error: str = Field(default="", max_length=2000, description="Why it could not commit.")


class LogRequest(BaseModel):
    """The manager wants a session's log tail: upload it with `PUT …/logs/{id}`."""

    id: str
    session_id: str
    tail: int


class Assignments(BaseModel):
    """The node's whole desired state at `version`; anything not listed must not run."""

    node_id: str
    version: int
    sessions: list[Assignment]
    log_requests: list[LogRequest]
    exec_requests: list[ExecRequest] = Field(default_factory=list)
    commit_requests: list[CommitRequest] = Field(default_factory=list)
    remove_images: list[str] = Field(
        default_factory=list,
        description="Images removed from the catalog: delete them once no container uses them.",
    )
    rescan: int = Field(
        default=0, description="When it changes, report images (send a heartbeat) at once."
    )


class StateReport(BaseModel):
    """A session's actual state on the node."""

    status: SessionStatus = Field(
        description="PREPARING, RUNNING, TERMINATED (exited or stopped) or ERROR (failed)."
    )
    exit_code: int | None = Field(default=None, description="TERMINATED: the process exit code.")
    reason: str = Field(default="", max_length=2000)
    logs: str | None = Field(
        default=None, max_length=1024 * 1024,
        description="TERMINATED/ERROR: the session's last output, kept after its container "
        "is removed.",
    )


class LogUpload(BaseModel):
    logs: str = Field(max_length=4 * 1024 * 1024)
    truncated: bool = False


class NodePublic(BaseModel):
    id: str
    name: str
    pool: str
    status: NodeStatus
    cpu: Number
    mem: int
    cpu_used: Number
    mem_used: int
    fgpu_per_gpu: Number
    devices: list[DevicePublic]
    images: list[str]
    last_heartbeat_at: datetime | None
    registered_at: datetime


class DevicePublic(BaseModel):
    index: int
    uuid: str
    model: str
    mem: int
    sms: int
    capacity: Number = Field(description="fGPU.")
    used: Number = Field(description="fGPU allocated.")


NodePublic.model_rebuild()
