"""Projects (teams with quotas and resource groups) and resource groups."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from gpuslice.common.schemas.common import CpuIn, FgpuIn, MemIn, Number
from gpuslice.common.text import Line

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


class ProjectCreate(ProjectQuotas):
    name: ProjectName = Field(description="Lowercase letters, digits, . _ -")
    description: Line = Field(default="", max_length=255)


class ProjectUpdate(ProjectQuotas):
    """Replace a project's quotas and groups (all of them); the description if given."""

    description: Line | None = Field(default=None, max_length=255)


class ProjectMember(BaseModel):
    username: Line = Field(min_length=1, max_length=64)


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
