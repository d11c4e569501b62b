"""Node agents: joining, heartbeats, assignments (desired state down) and state reports (up).

An agent authenticates every call after registration with `Authorization: Bearer <credential>`.
On this wire amounts are exact integers (milli-fGPU, milli-cores, bytes) and durations are
milliseconds: no floats, so nothing is rounded between the manager and a container.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from gpuslice.common.schemas.common import ExactResources, Number
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
    utilization: int = Field(default=0, ge=0, le=100, description="Percent busy (measured).")


class NodeRegister(BaseModel):
    join_token: str = Field(min_length=1, max_length=256)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    pool: str = Field(default="default", min_length=1, max_length=64)
    device_capacity: int | None = Field(
        default=None, ge=10, le=100_000, multiple_of=10,
        description="This node's fGPU per GPU in milli-fGPU (2 fGPU per GPU = 2000), "
        "overriding the manager's default.",
    )


class NodeRegistered(BaseModel):
    node_id: str
    credential: str = Field(description="The agent's secret for every later call; shown once.")
    heartbeat_interval_ms: int = Field(description="Milliseconds between heartbeats.")


class ImageReport(BaseModel):
    """One tagged image on a node: its tag, Docker image id, size and its own labels."""

    tag: str = Field(min_length=1, max_length=255)
    image_id: str | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0, description="Bytes.")
    labels: dict[str, str] = Field(default_factory=dict)


class SessionUsage(BaseModel):
    """What one session's container uses now, measured by the agent from its cgroup."""

    session_id: str = Field(min_length=1, max_length=64)
    cpu: int | None = Field(
        default=None, ge=0,
        description="Milli-cores busy, averaged since the previous heartbeat (none yet: null).",
    )
    mem: int = Field(ge=0, description="Bytes of memory in use (page cache excluded).")


class Heartbeat(BaseModel):
    """What a node has and runs now. Sent every `heartbeat_interval_ms`."""

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
    usage: list[SessionUsage] = Field(default_factory=list, max_length=10_000)
    engine_error: str | None = Field(
        default=None, max_length=500,
        description="Why the node's Docker Engine does not answer (None: it does). The node "
        "stays ALIVE; images, running and usage are then unknown, not empty.",
    )

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
    """One device slice of an assigned session, in exact units (see ``common.resources``)."""

    device_index: int
    device_uuid: str
    gpu: int = Field(description="Milli-fGPU of the slice.")
    capacity: int = Field(description="Milli-fGPU of the whole device (fGPU per GPU × 1000).")
    fraction: Decimal = Field(
        description="Share of the device (`slice_fraction`), a decimal string such as \"0.25\"."
    )
    mem: int = Field(description="Bytes of device memory of the slice.")
    sms: int = Field(description="Streaming multiprocessors of the slice.")
    sm_percent: int = Field(description="Compute share in whole percent (`sm_percent`).")


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
    resources: ExactResources
    slices: list[SliceAssignment]
    pull: bool = Field(
        default=False,
        description="The image is in the registry and this node lacks it: pull it, reporting "
        "progress as PREPARING reasons.",
    )


# ------------------------------------------------------------ the request channel
# The manager asks an agent for something (``services/channel.ask``): a request rides down with
# the node's assignments, once, and the agent answers it with ``PUT /agents/me/requests/{id}``
# (an answer of the same ``kind``). See the manager README, "The request channel".


class LogsAsk(BaseModel):
    """The last ``tail`` lines of a session's output."""

    kind: Literal["logs"] = "logs"
    tail: int = Field(ge=1, le=100_000)


class ExecAsk(BaseModel):
    """Run ``command`` in a session as its user; kill it after ``timeout_ms``."""

    kind: Literal["exec"] = "exec"
    command: list[str] = Field(min_length=1, max_length=256)
    timeout_ms: int = Field(gt=0, le=3_600_000)


class CommitAsk(BaseModel):
    """Commit a session's container as ``reference`` (``repo:tag``) with ``labels`` added to its
    image's own."""

    kind: Literal["commit"] = "commit"
    reference: str = Field(min_length=1, max_length=255)
    labels: dict[str, str] = Field(default_factory=dict)


Ask = Annotated[LogsAsk | ExecAsk | CommitAsk, Field(discriminator="kind")]


class AgentRequest(BaseModel):
    """One request for the agent, delivered once: answer it with ``PUT …/requests/{id}``."""

    id: str
    session_id: str | None = Field(description="The session it concerns, if any.")
    ask: Ask


class LogsAnswer(BaseModel):
    kind: Literal["logs"] = "logs"
    logs: str = Field(default="", max_length=4 * 1024 * 1024)
    truncated: bool = False


class ExecAnswer(BaseModel):
    """What a command run in a session printed, and how it ended."""

    kind: Literal["exec"] = "exec"
    exit_code: int = Field(default=-1, ge=-(2**31), le=2**31 - 1)
    stdout: str = Field(default="", max_length=4 * 1024 * 1024)
    stderr: str = Field(default="", max_length=4 * 1024 * 1024)
    error: str = Field(default="", max_length=2000, description="Why it could not run at all.")


class CommitAnswer(BaseModel):
    """The committed image (its id, size and labels), or why the commit failed."""

    kind: Literal["commit"] = "commit"
    image_id: str | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0, le=2**62)
    labels: dict[str, str] = Field(default_factory=dict)
    error: str = Field(default="", max_length=2000, description="Why it could not commit.")


Answer = Annotated[LogsAnswer | ExecAnswer | CommitAnswer, Field(discriminator="kind")]


class Assignments(BaseModel):
    """The node's whole desired state at `version`; anything not listed must not run."""

    node_id: str
    version: int
    sessions: list[Assignment]
    requests: list[AgentRequest] = Field(
        default_factory=list, description="New requests, each delivered in one answer only."
    )
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
    engine_error: str | None = Field(
        default=None, description="Why the node's Docker Engine does not answer, if it does not."
    )


class DevicePublic(BaseModel):
    index: int
    uuid: str
    model: str
    mem: int
    sms: int
    capacity: Number = Field(description="fGPU.")
    used: Number = Field(description="fGPU allocated.")


NodePublic.model_rebuild()
