"""`gpuslice run`: a training script run as a batch session on a GPU slice.

The script and its directory are uploaded first to the caller's ``runs`` folder (under
``runs/<name>/``); the run is a batch session that mounts that folder (and any others asked
for), runs the script there, and saves its save directory to the model store under the run's
name when the script succeeds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from gpuslice.common.limits import PRIORITY_BOUND
from gpuslice.common.schemas.common import ResourcesIn, ResourcesPublic
from gpuslice.common.schemas.models import FilePath, ModelPublic
from gpuslice.common.schemas.sessions import (
    EnvVars,
    FolderRequests,
    SessionName,
    SessionResult,
    SessionStatus,
)
from gpuslice.common.schemas.storage import MAX_SESSION_FOLDERS

RUNS_FOLDER = "runs"
# The run's session runs ``gpuslice-run`` with its own options before the script's argv, and
# a session's command is at most 256 arguments: these leave room for them.
RUN_ARGS_MAX = 236


def _check_arg(value: str) -> str:
    if "\x00" in value:
        raise ValueError("arguments cannot hold NUL characters")
    return value


class RunCreate(BaseModel):
    """Start a run of ``script`` (uploaded to ``runs/<name>/`` of the caller's folders)."""

    name: SessionName = Field(description="1-63 lowercase letters, digits and dashes.")
    script: FilePath = Field(description="The script, relative to the run's code directory.")
    args: list[Annotated[str, AfterValidator(_check_arg), Field(max_length=4096)]] = Field(
        default_factory=list, max_length=RUN_ARGS_MAX
    )
    image: str = Field(min_length=1, max_length=255)
    resources: ResourcesIn = Field(default_factory=ResourcesIn)
    folders: FolderRequests = Field(default_factory=list, max_length=MAX_SESSION_FOLDERS - 1)
    save_dir: FilePath = Field(
        default="output", description="Saved to the model store when the script succeeds."
    )
    env: EnvVars = Field(default_factory=dict, max_length=256)
    priority: int = Field(default=0, ge=-PRIORITY_BOUND, le=PRIORITY_BOUND)


class RunPublic(BaseModel):
    """A run: its session's state, how long it ran, and the model it saved."""

    id: str = Field(description="The run's session id.")
    name: str
    script: str
    args: list[str]
    save_dir: str
    image: str
    resources: ResourcesPublic
    status: SessionStatus
    status_reason: str
    result: SessionResult | None
    exit_code: int | None
    created_at: datetime
    started_at: datetime | None = Field(description="When it started RUNNING.")
    ended_at: datetime | None
    duration_s: float | None = Field(description="Seconds it ran (so far, while it runs).")
    model: ModelPublic | None = Field(description="The model it saved, once saved.")
