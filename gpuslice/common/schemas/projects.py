"""Projects (teams with quotas and resource groups) and resource groups."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationInfo,
    model_validator,
)

from gpuslice.common.resources import ResourceError
from gpuslice.common.schemas.common import CpuIn, FgpuIn, MemIn, Number
from gpuslice.common.text import Line
from gpuslice.common.timelimits import format_limit, parse_time_limit

# Admins' project names and resource groups (`a100`, `t4`, `cpu`); a personal project is
# "~<username>", which no admin's name can be.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
DEFAULT_GROUP = "default"


def _named(what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(f"{what} {value!r}: use 1-64 lowercase letters, digits, '.', '_' "
                             "and '-', starting with a letter or digit")
        return value
    return AfterValidator(check)


ProjectName = Annotated[str, _named("project")]
GroupName = Annotated[str, _named("resource group")]


def _time_limit(value: object, info: ValidationInfo) -> object:
    # the same forms and bounds as `--time` (30m, 2h, 1d, 1:30:00); an int is already seconds
    if value is None:
        return value
    try:
        return parse_time_limit(value, field=info.field_name or "time_limit")
    except ResourceError as exc:
        raise ValueError(exc.message) from None


TimeLimitIn = Annotated[int, BeforeValidator(_time_limit), Field(ge=1, le=365 * 86400)]


class ProjectQuotas(BaseModel):
    """What a project's allocated sessions may hold together; omit a field = no limit."""

    max_sessions: int | None = Field(default=None, ge=0, le=100_000)
    max_gpu: FgpuIn | None = Field(default=None, description="fGPU in use at once, e.g. 8.")
    max_cpu: CpuIn | None = None
    max_mem: MemIn | None = None
    max_storage: MemIn | None = Field(
        default=None, description="Bytes the project's folders may hold, e.g. 500g."
    )
    max_gpu_models: dict[Annotated[str, Field(min_length=1, max_length=64)], FgpuIn] | None = (
        Field(default=None, max_length=32,
              description="fGPU per GPU model at once, e.g. {\"a100\": 4}: a model matches "
              "devices whose name contains it, case-insensitively.")
    )
    groups: list[GroupName] | None = Field(
        default=None, max_length=64,
        description="The resource groups its sessions may run in (omit: any).",
    )
    default_time_limit: TimeLimitIn | None = Field(
        default=None, description="Seconds (or 30m, 2h, 1d, 1:30:00) its sessions get when "
        "they name no time limit (omit: the settings' default).",
    )
    max_time_limit: TimeLimitIn | None = Field(
        default=None, description="The longest time limit its sessions may name (omit: the "
        "settings' maximum alone; both hold, the smaller wins).",
    )

    @model_validator(mode="after")
    def _default_within_max(self) -> ProjectQuotas:
        # a default above the maximum would be cut to it on every launch: say so at once
        low, high = self.default_time_limit, self.max_time_limit
        if low is not None and high is not None and low > high:
            raise ValueError(f"the default time limit {format_limit(low)} is longer than the "
                             f"maximum {format_limit(high)}")
        return self


class ProjectCreate(ProjectQuotas):
    name: ProjectName = Field(description="Lowercase letters, digits, . _ -")
    description: Line = Field(default="", max_length=255)


class ProjectUpdate(ProjectQuotas):
    """Replace a project's quotas and groups (all of them); the description if given."""

    description: Line | None = Field(default=None, max_length=255)


class ProjectMember(BaseModel):
    username: Line = Field(min_length=1, max_length=64)


class ProjectRename(BaseModel):
    """A project's new name: its members, quotas, sessions, folders and usage stay with it
    (they refer to its id)."""

    name: ProjectName = Field(description="Lowercase letters, digits, . _ -")


class ProjectUsage(BaseModel):
    """What the project's allocated sessions hold now."""

    sessions: int
    gpu: Number
    cpu: Number
    mem: int


class ProjectPublic(BaseModel):
    id: str
    name: str
    description: str
    personal: bool = Field(description="A user's own project (named ~<username>).")
    members: list[str] = Field(description="Usernames who may launch in it.")
    max_sessions: int | None
    max_gpu: Number | None
    max_cpu: Number | None
    max_mem: int | None
    max_storage: int | None
    max_gpu_models: dict[str, Number] | None
    groups: list[str] | None = Field(description="Resource groups it may use (null: any).")
    default_time_limit: int | None = Field(
        default=None, description="Seconds its sessions get when they name none (null: the "
        "settings' default).")
    max_time_limit: int | None = Field(
        default=None, description="The longest time limit in seconds its sessions may name "
        "(null: the settings' maximum alone).")
    usage: ProjectUsage
    created_at: datetime


class GroupSetRequest(BaseModel):
    group: GroupName = Field(description="The node's resource group from now on.")


class GroupPublic(BaseModel):
    """A resource group: its alive nodes and their free capacity."""

    name: str
    nodes: int
    gpus: int
    gpu_models: list[str]
    gpu_free: Number = Field(description="Free fGPU over its alive nodes.")
    gpu_total: Number
    largest_slice: Number = Field(description="The largest free slice on one GPU (fGPU).")
    cpu_free: Number
    mem_free: int


class IdpGroups(BaseModel):
    """The groups at an identity provider whose members are a project's members (``idp``
    memberships, synced at each sign-in and re-check)."""

    provider: Literal["ldap", "oidc"]
    groups: list[Annotated[Line, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list, max_length=100,
        description="Group names as the provider sends them (a cn or DN for LDAP, as "
        "auth.ldap.group_value says); an empty list unlinks every group of this provider.")
