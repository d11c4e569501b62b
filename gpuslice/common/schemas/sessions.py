"""Compute sessions: what a client asks for and what the manager answers."""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator

from gpuslice.common.limits import CREATE_COUNT_MAX, DEFAULT_TYPE, PRIORITY_BOUND
from gpuslice.common.resources import ResourceError
from gpuslice.common.schemas.common import Number, ResourcesIn, ResourcesPublic
from gpuslice.common.schemas.priorities import PRIORITY_CLASS_PATTERN
from gpuslice.common.schemas.projects import GroupName
from gpuslice.common.schemas.storage import (
    MAX_SESSION_FOLDERS,
    SessionFolder,
    parse_folder_request,
)
from gpuslice.common.text import Line
from gpuslice.common.timelimits import MAX_TIME_LIMIT, parse_time_limit

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# The rules a session's request and a run's (which becomes a session) share: one home each,
# so that what a run takes in its session takes too.
def check_session_name(value: str) -> str:
    if not _NAME_RE.match(value):
        raise ValueError(
            "name: use 1-63 lowercase letters, digits and dashes, starting and ending "
            "with a letter or digit"
        )
    return value


def check_env(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not _ENV_KEY_RE.match(key):
            raise ValueError(f"env: {key!r} is not a valid variable name")
    return value


def check_folder_requests(value: list[str]) -> list[str]:
    for item in value:
        parse_folder_request(item)
    return value


SessionName = Annotated[str, AfterValidator(check_session_name)]
EnvVars = Annotated[
    dict[str, Annotated[str, Field(max_length=32768)]], AfterValidator(check_env)
]
FolderRequests = Annotated[list[str], AfterValidator(check_folder_requests)]


class SessionStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"


# Sessions in these states hold their allocation (device slices, node CPU and memory).
HOLDING = frozenset(
    {
        SessionStatus.SCHEDULED,
        SessionStatus.PREPARING,
        SessionStatus.RUNNING,
        SessionStatus.TERMINATING,
    }
)
FINAL = frozenset({SessionStatus.TERMINATED, SessionStatus.ERROR, SessionStatus.CANCELLED})


class SessionType(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"


class SessionResult(StrEnum):
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class Timing(BaseModel):
    """When a session may start and how long it may run (``--begin``, ``--time``)."""

    time_limit: int | None = Field(
        default=None, ge=1, le=MAX_TIME_LIMIT,
        description="Seconds it may run once RUNNING; then it is ended with that reason (a "
        "warning signal comes a few minutes before). Also `30m`, `2h`, `1d`, `1:30:00` or "
        "Slurm's minutes (`90`). None: its project's default, else the admin's, if any.",
    )
    begin_at: datetime | None = Field(
        default=None,
        description="Do not start before this moment (ISO 8601 with an offset); it waits "
        "PENDING until then (`--begin 22:00`, `--begin +1h` in the CLI).",
    )

    @field_validator("time_limit", mode="before")
    @classmethod
    def _parse_time_limit(cls, value: object) -> int | None:
        if value is None or isinstance(value, int):
            return value
        try:
            return parse_time_limit(value)
        except ResourceError as exc:
            raise ValueError(exc.message) from None

    @field_validator("begin_at")
    @classmethod
    def _aware_begin(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("begin_at: give a time zone offset, e.g. 2026-12-01T22:00:00Z")
        return value


class SessionCreate(Timing):
    """Launch ``count`` sessions of one shape; they start PENDING and the scheduler places them."""

    image: str = Field(min_length=1, max_length=255, description="Image name, e.g. `torch:2.3`.")
    resources: ResourcesIn = Field(default_factory=ResourcesIn)
    gpu_model: Line | None = Field(
        default=None, max_length=128, description="Only place on GPUs of this model."
    )
    count: int = Field(
        default=1, ge=1, le=CREATE_COUNT_MAX, description="How many identical sessions."
    )
    name: SessionName | None = Field(
        default=None,
        description="Lowercase letters, digits and dashes; `-<n>` is appended when count > 1.",
    )
    type: SessionType = SessionType(DEFAULT_TYPE)
    command: list[str] | None = Field(
        default=None, max_length=256, description="Batch sessions: the command to run (argv)."
    )
    command_line: Line | None = Field(
        default=None, max_length=32768,
        description="Instead of `command`: one line split into argv as a POSIX shell splits it "
        "(quotes, backslashes), e.g. `python3 -c 'print(6*7)'`; it is not run by a shell.",
    )
    env: EnvVars = Field(default_factory=dict, max_length=256)
    priority: int = Field(
        default=0,
        ge=-PRIORITY_BOUND,
        le=PRIORITY_BOUND,
        description="Higher runs first; bounded by the user's resource policy.",
    )
    priority_class: str | None = Field(
        default=None, pattern=PRIORITY_CLASS_PATTERN,
        description="Its priority class (GET /api/v1/priority-classes lists them; none: the "
        "default class). It ranks before `priority`; a higher class may preempt lower-class "
        "batch sessions.",
    )
    apps: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=32,
        description="Apps of the image to start as soon as the session runs, e.g. "
        "[\"jupyter\"] (others start when first opened).",
    )
    folders: FolderRequests = Field(
        default_factory=list, max_length=MAX_SESSION_FOLDERS,
        description="Storage folders to mount at /home/work/<name>: `NAME` (read-write where "
        "allowed) or `NAME:ro`; the owner's dot-folders are mounted anyway.",
    )
    project: Line | None = Field(
        default=None, max_length=80,
        description="The project it runs in (one you are a member of); omit: your personal one.",
    )
    group: GroupName | None = Field(
        default=None, description="The resource group to run in; omit: any the project may use."
    )

    @field_validator("command_line")
    @classmethod
    def _check_command_line(cls, value: str | None) -> str | None:
        if value is not None:
            split_command(value)
        return value

    @model_validator(mode="after")
    def _one_command(self) -> SessionCreate:
        if self.command_line is None:
            return self
        if self.command is not None:
            raise ValueError("give command (argv) or command_line, not both")
        self.command = split_command(self.command_line) or None
        self.command_line = None
        return self



def split_command(line: str) -> list[str]:
    """argv from a shell-like line; ValueError naming what is wrong."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ValueError(f"command_line: {str(exc).lower()} in {line!r}") from None
    if len(argv) > 256:
        raise ValueError(f"command_line: {len(argv)} arguments; at most 256 are allowed")
    return argv


class SessionDestroy(BaseModel):
    """Destroy several sessions at once."""

    ids: list[Annotated[str, Field(max_length=64)]] = Field(min_length=1, max_length=1000)


class AllocationPublic(BaseModel):
    """One device slice a session holds."""

    device_index: int
    device_uuid: str
    device_model: str
    gpu: Number = Field(description="fGPU on this device.")
    fraction: Number = Field(description="Share of the device, 0 < fraction <= 1.")
    mem: int = Field(description="Bytes of device memory of the slice.")
    sms: int = Field(description="Streaming multiprocessors of the slice.")


class PlacementPublic(BaseModel):
    node_id: str
    node_name: str
    devices: list[AllocationPublic]


class StatusChange(BaseModel):
    """One transition of a session's status."""

    id: int = Field(description="Increasing event id (use it to resume a stream).")
    session_id: str
    from_status: SessionStatus | None
    status: SessionStatus
    reason: str
    at: datetime


class ReclaimPublic(BaseModel):
    """When an idle rule or the lifetime limit of its owner's policy will reclaim the session
    (stop it, TERMINATED with ``reason``) if it goes on as it is now."""

    at: datetime = Field(description="When it will be stopped (in the past: any moment now).")
    kind: Literal["idle", "lifetime"]
    reason: str = Field(description="The reason its status will carry.")


class SessionPublic(BaseModel):
    id: str
    name: str
    owner_id: str
    owner: str
    image: str
    type: SessionType
    command: list[str] | None
    env: dict[str, str]
    priority: int
    priority_class: str | None = Field(default=None, description="Its priority class.")
    preemptions: int = Field(
        default=0, description="How many times it was preempted and queued again."
    )
    resources: ResourcesPublic
    gpu_model: str | None
    project: str | None = Field(default=None, description="The project it runs in.")
    group: str | None = Field(
        default=None, description="The resource group it asked for (null: any it may use)."
    )
    status: SessionStatus
    status_reason: str = Field(description="Why it is in this status (e.g. why it waits).")
    wait_code: str | None = Field(description="PENDING only: a stable code for the reason.")
    queue_position: int | None = Field(description="PENDING only: 1-based place in the queue.")
    result: SessionResult | None
    exit_code: int | None
    placement: PlacementPublic | None
    folders: list[SessionFolder] = Field(
        default_factory=list, description="Storage folders it mounts (dot-folders too)."
    )
    created_at: datetime
    updated_at: datetime
    purged_at: datetime | None = Field(
        default=None, description="When retention purged its kept logs and environment."
    )
    history: list[StatusChange] | None = Field(
        default=None, description="Every status change (in single-session answers)."
    )
    reclaim: ReclaimPublic | None = Field(
        default=None,
        description="RUNNING, in single-session answers: when its owner's idle rule or lifetime "
        "limit will reclaim it if it goes on as it is (null: nothing will).",
    )
    time_limit: int | None = Field(
        default=None, description="Seconds it may run once RUNNING (null: no limit)."
    )
    begin_at: datetime | None = Field(default=None, description="It starts no sooner.")
    ends_at: datetime | None = Field(
        default=None, description="RUNNING with a time limit: when it is ended."
    )


class GpuModelShape(BaseModel):
    """One GPU model of the alive nodes: what a slice of it is worth."""

    model: str
    mem: int = Field(description="Bytes of one GPU.")
    sms: int = Field(description="Streaming multiprocessors of one GPU (0: unknown).")
    fgpu_per_gpu: Number = Field(description="fGPU one GPU of this model holds on its nodes.")


class SessionPreview(BaseModel):
    """What creating a request would do now: how many of its sessions the scheduler would start
    at once and how many would queue (and why), with the cluster's shape for a GPU picker.
    Nothing is created; the same checks as creating apply (the same errors)."""

    fits_now: int = Field(description="Sessions that would start at once.")
    will_queue: int = Field(description="Sessions that would wait PENDING.")
    reason: str | None = Field(description="Why the first one to queue would wait.")
    queue_position: int | None = Field(description="Its 1-based place in the queue.")
    fgpu_step: Number = Field(description="The cluster's fGPU step (`scheduler.fgpu_step`).")
    fgpu_per_gpu: list[Number] = Field(
        description="fGPU per GPU of the alive nodes (the default when none has a GPU)."
    )
    max_gpu: Number = Field(description="The most fGPU one session could get on one node.")
    largest_free: Number = Field(description="The largest free slice on one GPU now.")
    gpu_models: list[GpuModelShape] = Field(
        default_factory=list, description="The alive nodes' GPU models, so a client can say "
        "what a slice is in memory and SMs (f fGPU = f / fgpu_per_gpu of one GPU).",
    )


class SessionExec(BaseModel):
    """Run a command in a RUNNING session, as the session's user."""

    command: list[str] = Field(min_length=1, max_length=256, description="argv, e.g. [\"ls\"].")
    timeout: float = Field(default=60, gt=0, le=600, description="Seconds before it is killed.")


class SessionExecResult(BaseModel):
    session_id: str
    exit_code: int
    stdout: str
    stderr: str


class SessionLogs(BaseModel):
    session_id: str
    logs: str
    truncated: bool = False
    purged: bool = Field(
        default=False, description="The kept logs were purged (sessions.retention_days)."
    )
