"""Priority classes: admin-defined ranks a session runs at, and what preemption may do to it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

PRIORITY_CLASS_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
RANK_BOUND = 1000
MAX_MIN_RUNTIME_S = 30 * 24 * 3600
MAX_GRACE_S = 3600
MAX_PROJECTS = 1000
# A project by name: an admin's ("vision") or a personal one ("~alice").
ProjectRef = Annotated[str, Field(min_length=1, max_length=80)]


class PriorityClassCreate(BaseModel):
    """A priority class. A waiting session of a higher rank may preempt (stop, then queue again)
    RUNNING batch sessions of a lower one that ran at least their class's minimum runtime."""

    name: str = Field(pattern=PRIORITY_CLASS_PATTERN, description="e.g. `high`.")
    rank: int = Field(ge=0, le=RANK_BOUND, description="Higher runs first and may preempt lower.")
    min_runtime_s: int = Field(
        default=600, ge=0, le=MAX_MIN_RUNTIME_S,
        description="Sessions of this class are never preempted before running this long.",
    )
    grace_s: int = Field(
        default=30, ge=0, le=MAX_GRACE_S,
        description="Seconds between SIGTERM and SIGKILL when a session of this class is "
        "stopped (GPUSLICE_PREEMPT_GRACE_S inside it), so a script can checkpoint.",
    )
    preempt_interactive: bool = Field(
        default=False,
        description="Interactive sessions of this class may be preempted too (never by default).",
    )
    default: bool = Field(default=False, description="The class of sessions that name none.")
    projects: list[ProjectRef] = Field(
        default_factory=list, max_length=MAX_PROJECTS,
        description="The projects whose sessions may use it (by name). With none and without "
        "`any_project`, only admins may use it.",
    )
    any_project: bool = Field(
        default=False,
        description="Every project (so every user) may use it. The default class always is.",
    )


class PriorityClassUpdate(BaseModel):
    """Change some of a class's values (omitted ones are kept)."""

    rank: int | None = Field(default=None, ge=0, le=RANK_BOUND)
    min_runtime_s: int | None = Field(default=None, ge=0, le=MAX_MIN_RUNTIME_S)
    grace_s: int | None = Field(default=None, ge=0, le=MAX_GRACE_S)
    preempt_interactive: bool | None = None
    default: bool | None = Field(default=None, description="true: make it the default.")
    projects: list[ProjectRef] | None = Field(
        default=None, max_length=MAX_PROJECTS,
        description="Replace the projects that may use it (by name); [] with `any_project` "
        "false or omitted: only admins.",
    )
    any_project: bool | None = Field(
        default=None,
        description="true: every project may use it (its projects are dropped); false: only "
        "its projects (none: only admins).",
    )


class PriorityClassPublic(BaseModel):
    id: str
    name: str
    rank: int
    min_runtime_s: int
    grace_s: int
    preempt_interactive: bool
    default: bool = False
    # The projects whose sessions may use it, by name (a user sees their own projects only).
    projects: list[str] = Field(default_factory=list)
    # Every project may use it (the default class always); neither this nor projects: admins.
    any_project: bool = False
    created_at: datetime
