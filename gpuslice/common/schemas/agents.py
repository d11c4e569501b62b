"""The agent wire protocol: what node agents and the manager send each other (joining,
heartbeats, assignments down, state reports up, and the asks and answers in between).

An agent authenticates every call after registration with `Authorization: Bearer <credential>`.
On this wire amounts are exact integers (milli-fGPU, milli-cores, bytes) and durations are
milliseconds: no floats, so nothing is rounded between the manager and a container. What admins
see of nodes and join tokens is in ``gpuslice.common.schemas.nodes``.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from gpuslice.common.schemas.common import ExactResources
from gpuslice.common.schemas.projects import GroupName
from gpuslice.common.schemas.sessions import SessionStatus, SessionType
from gpuslice.common.text import Line

# Bounds of what a node may report: far above any machine, far below what overflows a column.
MAX_CPU = 10**9  # milli-cores (a million cores)
MAX_BYTES = 2**60  # an exbibyte
MAX_EXIT_CODE = 2**31 - 1
# An image's Docker labels (a JSON object of strings).
Labels = dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=16384)]]


NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class NodeStatus(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"
    REVOKED = "REVOKED"  # an admin revoked its credential; only a re-key token brings it back


class DeviceReport(BaseModel):
    index: int = Field(ge=0, le=1023)
    uuid: Line = Field(min_length=1, max_length=128)
    model: Line = Field(min_length=1, max_length=128)
    mem: int = Field(ge=0, le=MAX_BYTES, description="Device memory in bytes.")
    sms: int = Field(default=0, ge=0, le=1_000_000)
    mem_used: int = Field(default=0, ge=0, le=MAX_BYTES, description="Bytes in use (measured).")
    utilization: int = Field(default=0, ge=0, le=100, description="Percent busy (measured).")


AgentId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]


class NodeRegister(BaseModel):
    """Register a node: with a join token, or (an existing node rotating its credential) with
    its current credential as the bearer token and no join token."""

    join_token: str | None = Field(default=None, min_length=1, max_length=256)
    name: str = Field(pattern=NODE_NAME)
    pool: GroupName | None = Field(
        default=None,
        description="The node's resource group (`--resource-group`); omit: \"default\" for a "
        "new node, and a node registering again keeps the one it has (an admin may have moved "
        "it with `gpuslice node set-group`).",
    )
    device_capacity: int | None = Field(
        default=None, ge=10, le=100_000, multiple_of=10,
        description="This node's fGPU per GPU in milli-fGPU (2 fGPU per GPU = 2000), "
        "overriding the manager's default.",
    )
    agent_id: AgentId | None = Field(
        default=None, description="The registering agent's own id (kept in its data "
        "directory): refused while another agent of this node is alive.",
    )


class NodeRegistered(BaseModel):
    node_id: str
    credential: str = Field(description="The agent's secret for every later call; shown once.")
    heartbeat_interval_ms: int = Field(description="Milliseconds between heartbeats.")


class ImageReport(BaseModel):
    """One tagged image on a node: its tag, Docker image id, size and its own labels."""

    tag: Line = Field(min_length=1, max_length=255)
    image_id: Line | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0, le=MAX_BYTES, description="Bytes.")
    labels: Labels = Field(default_factory=dict, max_length=256)


class SessionGpuUsage(BaseModel):
    """What one session's own processes use of one device (never the device's totals)."""

    uuid: str = Field(min_length=1, max_length=128)
    mem_used: int | None = Field(
        default=None, ge=0, le=2**50,
        description="Bytes of GPU memory its processes hold now (null: not measured).",
    )
    utilization: int | None = Field(
        default=None, ge=0, le=100,
        description="Percent of the device's SMs its processes kept busy, averaged since the "
        "previous heartbeat (null: not measured).",
    )


class SessionUsage(BaseModel):
    """What one session's container uses now, measured by the agent from its cgroup, and its
    GPU figures from its own processes (NVML per-process data mapped to it by cgroup)."""

    session_id: Line = Field(min_length=1, max_length=64)
    cpu: int | None = Field(
        default=None, ge=0, le=MAX_CPU,
        description="Milli-cores busy, averaged since the previous heartbeat (none yet: null).",
    )
    mem: int = Field(ge=0, le=MAX_BYTES, description="Bytes of memory in use (no page cache).")
    at_ms: int | None = Field(
        default=None, ge=0,
        description="When the agent read it (its clock, ms since the epoch): the manager keeps "
        "each reading once.",
    )
    interval_ms: int | None = Field(
        default=None, ge=0, le=86_400_000,
        description="Milliseconds since the previous reading the agent sent for this session "
        "(the time this one stands for; null for the first).",
    )
    gpus: list[SessionGpuUsage] | None = Field(
        default=None, max_length=64,
        description="Per device of its slice (and any other it holds memory on); [] for a "
        "session without GPU; null when the agent does not measure per session.",
    )


class Heartbeat(BaseModel):
    """What a node has and runs now. Sent every `heartbeat_interval_ms`."""

    cpu: int = Field(gt=0, le=MAX_CPU, description="Allocatable CPU in milli-cores.")
    mem: int = Field(gt=0, le=MAX_BYTES, description="Allocatable memory in bytes.")
    devices: list[DeviceReport] = Field(default_factory=list, max_length=1024)
    images: list[Annotated[Line, Field(max_length=255)]] = Field(
        default_factory=list, max_length=10_000
    )
    image_details: list[ImageReport] | None = Field(
        default=None, max_length=10_000,
        description="The same images with id, size and labels (agents that know them send them).",
    )
    running: list[Annotated[Line, Field(max_length=64)]] = Field(
        default_factory=list, max_length=10_000,
        description="Session ids with a container on this node now.",
    )
    usage: list[SessionUsage] = Field(default_factory=list, max_length=10_000)
    engine_error: str | None = Field(
        default=None, max_length=500,
        description="Why the node's Docker Engine does not answer (None: it does). The node "
        "stays ALIVE; images, running and usage are then unknown, not empty.",
    )
    agent_id: AgentId | None = Field(
        default=None, description="The sending agent's own id: a heartbeat of another "
        "agent than the node's live one is refused (409 `node_in_use`).",
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


_APP_NAME = r"^[a-z][a-z0-9-]{0,31}$"


class AppLaunch(BaseModel):
    """One app of a session: where it listens in the container, and how to start it there (the
    command is the image's, its placeholders filled in by the manager)."""

    name: str = Field(pattern=_APP_NAME)
    port: int = Field(ge=1, le=65535)
    command: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=64,
        description="argv run as the session's user; empty: the platform does not start it.",
    )
    start_timeout_ms: int = Field(
        default=60_000, ge=1000, le=3_600_000,
        description="How long a start may take before the app counts as failed.",
    )


class FolderMount(BaseModel):
    """A storage folder the session mounts: ``<storage_root>/<path>`` at ``/home/work/<name>``.

    ``path`` is relative to the storage root every node mounts at the same place. The agent
    checks both itself (a session with a bad mount fails alone, never the whole answer): it
    refuses a path that resolves outside the root (``..``, symbolic links) and a name that is
    not one path component.
    """

    path: str = Field(min_length=1, max_length=1024)
    name: str = Field(min_length=1, max_length=255)
    read_only: bool


# In a session's environment: the seconds it has between SIGTERM and SIGKILL when stopped
# (preempted, or stopped by its owner), its priority class's grace: time to checkpoint.
GRACE_VAR = "GPUSLICE_PREEMPT_GRACE_S"


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
    apps: list[AppLaunch] = Field(
        default_factory=list, max_length=32,
        description="Apps to start as soon as the session runs (asked for at its creation).",
    )
    mounts: list[FolderMount] = Field(
        default_factory=list, max_length=64,
        description="Storage folders to mount (dot-folders of the owner included).",
    )
    stop_grace_s: int | None = Field(
        default=None, ge=0, le=3600,
        description="Seconds between SIGTERM and SIGKILL when it is stopped (its priority "
        "class's grace); null: the agent's own `stop_grace_s`.",
    )
    requeued: int = Field(
        default=0, ge=0,
        description="Times it was preempted and queued again: a higher count than the agent "
        "saw is a new start of the session, whatever end it told of the earlier one.",
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


class StreamAsk(BaseModel):
    """Open a link for the session's streams (a terminal, an app's HTTP or WebSocket traffic):
    dial ``{manager_url}/api/v1/agents/me/streams/{request id}`` back as a WebSocket,
    authenticated as the node. The link carries one stream at a time, each named by its first
    message (``common.schemas.streams``); the agent closes it after ``idle_ms`` without one."""

    kind: Literal["stream"] = "stream"
    manager_url: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://",
        description="The manager replica that waits for the link; none: the agent's own.",
    )
    idle_ms: int = Field(default=30_000, ge=1000, le=3_600_000)
    ping_ms: int = Field(
        default=20_000, ge=100, le=600_000, description="WebSocket pings on the link."
    )


class AppsAsk(BaseModel):
    """The state of a session's apps; with ``start`` (one of ``apps``), start that one first
    unless it runs, and answer once it answers on its port, fails, or passes its timeout."""

    kind: Literal["apps"] = "apps"
    apps: list[AppLaunch] = Field(max_length=32)
    start: str | None = Field(default=None, pattern=_APP_NAME)
    ports: bool = Field(default=False, description="Also the TCP ports served in the session.")


class SignalAsk(BaseModel):
    """Send ``signal`` to the session's processes (its container's main process): the warning
    before its time limit, so that a script can save its work."""

    kind: Literal["signal"] = "signal"
    signal: str = Field(pattern=r"^SIG[A-Z0-9]+$", max_length=16)


Ask = Annotated[
    LogsAsk | ExecAsk | CommitAsk | StreamAsk | AppsAsk | SignalAsk, Field(discriminator="kind")
]


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
    image_id: Line | None = Field(default=None, max_length=128)
    size: int | None = Field(default=None, ge=0, le=MAX_BYTES)
    labels: Labels = Field(default_factory=dict, max_length=256)
    error: str = Field(default="", max_length=2000, description="Why it could not commit.")


class AppState(StrEnum):
    STOPPED = "stopped"  # not started (or gone since, e.g. after an agent restart)
    STARTING = "starting"
    READY = "ready"  # answers on its port
    FAILED = "failed"


class AppStatus(BaseModel):
    """One app as the node sees it."""

    name: str = Field(pattern=_APP_NAME)
    state: AppState
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    logs: str = Field(default="", max_length=16_384, description="Its last lines of output.")
    message: str = Field(default="", max_length=2000, description="Why it is in this state.")


class ListeningPort(BaseModel):
    """A TCP port a process in the session listens on for others than itself (on all its
    addresses, or its network address: not its loopback alone)."""

    port: int = Field(ge=1, le=65535)
    process: str = Field(default="", max_length=64, description="Its name; \"\" if unknown.")
    command: str = Field(default="", max_length=512, description="Its command line.")


class AppsAnswer(BaseModel):
    kind: Literal["apps"] = "apps"
    apps: list[AppStatus] = Field(default_factory=list, max_length=32)
    ports: list[ListeningPort] = Field(default_factory=list, max_length=1024)
    error: str = Field(default="", max_length=2000, description="Why nothing could be done.")


class SignalAnswer(BaseModel):
    kind: Literal["signal"] = "signal"
    error: str = Field(default="", max_length=2000, description="Why it was not sent.")


Answer = Annotated[
    LogsAnswer | ExecAnswer | CommitAnswer | AppsAnswer | SignalAnswer,
    Field(discriminator="kind"),
]


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
    exit_code: int | None = Field(
        default=None, ge=-MAX_EXIT_CODE - 1, le=MAX_EXIT_CODE,
        description="TERMINATED: the process exit code.",
    )
    reason: str = Field(default="", max_length=2000)
    restarted: bool = Field(
        default=False,
        description="RUNNING: the node made the session's container again (the reason says "
        "why); a line in its status history, its status unchanged.",
    )
    logs: str | None = Field(
        default=None, max_length=1024 * 1024,
        description="TERMINATED/ERROR: the session's last output, kept after its container "
        "is removed.",
    )
