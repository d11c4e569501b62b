"""Projects (teams with quotas and resource groups) and resource groups."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from gpuslice.common.schemas.common import CpuIn, FgpuIn, MemIn, Number
from gpuslice.common.text import Line

# Admins' project names; a personal project is "~<username>", which no admin name can be.
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
# A resource group (a node pool): `a100`, `t4`, `cpu`.
GROUP_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
GroupName = Annotated[str, Field(pattern=GROUP_PATTERN)]
DEFAULT_GROUP = "default"


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
    name: str = Field(pattern=PROJECT_PATTERN, description="Lowercase letters, digits, . _ -")
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
