"""`gpuslice run`: a training script run as a batch session on a GPU slice.

The script and its directory are uploaded first to the caller's ``runs`` folder (under
``runs/<name>/``, or ``runs/<name>.<N>/`` while an earlier run of the name keeps its own); the
run is a batch session that mounts that folder (and any others asked for), runs the script
there, and saves its save directory to the model store under the run's name (its next
version) when the script succeeds.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, model_validator

from gpuslice.common.limits import PRIORITY_BOUND
from gpuslice.common.schemas.common import ResourcesIn, ResourcesPublic
from gpuslice.common.schemas.models import FilePath, ModelPublic
from gpuslice.common.schemas.sessions import SessionResult, SessionStatus
from gpuslice.common.schemas.storage import MAX_SESSION_FOLDERS

RUNS_FOLDER = "runs"
_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


def _check_arg(value: str) -> str:
    if "\x00" in value:
        raise ValueError("arguments cannot hold NUL characters")
    return value


class RunCreate(BaseModel):
    """Start a run of ``script`` (uploaded to ``runs/<name>/`` of the caller's folders)."""

    name: str = Field(pattern=_NAME, description="Lowercase letters, digits and dashes.")
    script: FilePath = Field(description="The script, relative to the run's code directory.")
    args: list[Annotated[str, AfterValidator(_check_arg), Field(max_length=4096)]] = Field(
        default_factory=list, max_length=256
    )
    image: str = Field(min_length=1, max_length=255)
    resources: ResourcesIn = Field(default_factory=ResourcesIn)
    folders: list[str] = Field(default_factory=list, max_length=MAX_SESSION_FOLDERS - 1)
    save_dir: FilePath = Field(
        default="output", description="Saved to the model store when the script succeeds."
    )
    env: dict[str, Annotated[str, Field(max_length=32768)]] = Field(
        default_factory=dict, max_length=256
    )
    priority: int = Field(default=0, ge=-PRIORITY_BOUND, le=PRIORITY_BOUND)
    code_dir: str | None = Field(
        default=None, max_length=80,
        description="Its code's directory in the `runs` folder: `<name>` (the default) or, "
        "while an earlier run of the name keeps `<name>`, `<name>.2`, `<name>.3`, …",
    )

    @model_validator(mode="after")
    def _code_dir_of_name(self) -> RunCreate:
        # a run's directory is named after it: no run can take another name's directory
        if self.code_dir is not None and not re.fullmatch(
                rf"{re.escape(self.name)}(\.[1-9][0-9]{{0,5}})?", self.code_dir):
            raise ValueError(f"code_dir {self.code_dir!r}: use {self.name} or {self.name}.N "
                             "(N a number)")
        return self


class RunPublic(BaseModel):
    """A run: its session's state, how long it ran, and the model it saved."""

    id: str = Field(description="The run's session id.")
    name: str
    script: str
    args: list[str]
    save_dir: str
    code_dir: str = Field(description="Its code's directory in the `runs` folder.")
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
