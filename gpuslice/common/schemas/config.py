"""The platform's configuration as one JSON document: `gpuslice admin config export/import`.

What an admin set up, by name (never by database id, so it moves between clusters): resource
policies, users (password hashes only when asked), image aliases, the image catalog's
curation (allow list, visibility, owner), the launch dialog's resource presets, projects
(quotas, groups, members), nodes' resource groups and the priority classes. Sessions, nodes
and history are not configuration: backups (`gpuslice admin backup`) hold those.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuslice.common.schemas.images import ALIAS_PATTERN
from gpuslice.common.schemas.presets import PresetCreate
from gpuslice.common.schemas.priorities import PriorityClassCreate
from gpuslice.common.schemas.projects import GroupName, IdpGroups, ProjectName, ProjectQuotas
from gpuslice.common.schemas.users import USERNAME_PATTERN, PolicyCreate, Role

FORMAT = "gpuslice-config"
# argon2's encoded form, as the manager stores passwords ($argon2id$v=19$m=…,t=…,p=…$salt$hash)
ARGON2_PATTERN = r"^\$argon2(id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicyConfig(PolicyCreate):
    """A resource policy by name, its limits in user units (fGPU, cores, bytes)."""

    model_config = ConfigDict(extra="forbid")


class UserConfig(_Strict):
    username: str = Field(pattern=USERNAME_PATTERN)
    role: Role = Role.USER
    is_active: bool = True
    policy: str | None = Field(default=None, max_length=64, description="A policy's name.")
    password_hash: str | None = Field(
        default=None, max_length=255, pattern=ARGON2_PATTERN,
        description="Exported only when asked; a new user imported without one cannot log in "
        "until an admin sets a password.",
    )


class AliasConfig(_Strict):
    name: str = Field(pattern=ALIAS_PATTERN)
    reference: str = Field(min_length=1, max_length=255)


class ImageConfig(_Strict):
    name: str = Field(min_length=1, max_length=255, description="The image reference.")
    allowed: bool = Field(default=False, description="On the admin allow list.")
    public: bool = True
    owner: str | None = Field(default=None, pattern=USERNAME_PATTERN,
                              description="The username owning a private image.")


class PresetConfig(PresetCreate):
    """A resource preset by name, in user units (cores, bytes, fGPU)."""

    model_config = ConfigDict(extra="forbid")


class ProjectConfig(ProjectQuotas):
    """A project by name: its quotas (user units), groups and members (usernames)."""

    model_config = ConfigDict(extra="forbid")
    name: ProjectName
    description: str = Field(default="", max_length=255)
    members: list[str] = Field(default_factory=list, max_length=100_000)
    idp_groups: list[IdpGroups] | None = Field(
        default=None, max_length=2, description="Groups at identity providers whose members "
        "are its members (issue 42); absent: the project's links are left as they are.")


class NodeGroupConfig(_Strict):
    """A node's resource group, by the node's name."""

    node: str = Field(min_length=1, max_length=128)
    group: GroupName


class PriorityClassConfig(PriorityClassCreate):
    """A priority class by name (rank, minimum runtime, grace, interactive rule, default)."""

    model_config = ConfigDict(extra="forbid")


class ConfigDocument(_Strict):
    """Everything `config import` applies; every list is optional, entries merge by name."""

    format: Literal["gpuslice-config"] = "gpuslice-config"
    version: Literal[1] = 1
    exported_at: datetime | None = None
    policies: list[PolicyConfig] = Field(default_factory=list, max_length=10_000)
    users: list[UserConfig] = Field(default_factory=list, max_length=100_000)
    aliases: list[AliasConfig] = Field(default_factory=list, max_length=10_000)
    images: list[ImageConfig] = Field(default_factory=list, max_length=100_000)
    presets: list[PresetConfig] = Field(default_factory=list, max_length=10_000)
    projects: list[ProjectConfig] = Field(default_factory=list, max_length=10_000)
    groups: list[NodeGroupConfig] = Field(
        default_factory=list, max_length=100_000,
        description="Nodes' resource groups; a node this manager does not have is noted.",
    )
    priority_classes: list[PriorityClassConfig] = Field(default_factory=list, max_length=1_000)
    left_out: list[str] = Field(
        default_factory=list, max_length=100_000,
        description="Export: entries left out because they break today's rules (stored before "
        "a limit existed), each with the reason; fix or remove them. Ignored by import.",
    )


class SectionResult(BaseModel):
    created: int = 0
    updated: int = 0
    unchanged: int = 0


class ConfigImportResult(BaseModel):
    """What an import did (or, with `dry_run`, would do), per section."""

    dry_run: bool
    sections: dict[str, SectionResult]
    notes: list[str] = Field(default_factory=list, description="What the admin must still do.")
