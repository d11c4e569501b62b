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

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpuslice.common.limits import PRIORITY_BOUND
from gpuslice.common.schemas.common import ResourcesIn, ResourcesPublic
from gpuslice.common.schemas.models import FilePath, ModelPublic
from gpuslice.common.schemas.priorities import PRIORITY_CLASS_PATTERN
from gpuslice.common.schemas.projects import GroupName
from gpuslice.common.schemas.sessions import (
    EnvVars,
    FolderRequests,
    SessionName,
    SessionResult,
    SessionStatus,
    Timing,
)
from gpuslice.common.schemas.storage import MAX_SESSION_FOLDERS
from gpuslice.common.text import Line

RUNS_FOLDER = "runs"
# The run's session runs ``gpuslice-run`` with its own options before the script's argv, and
# a session's command is at most 256 arguments: these leave room for them.
RUN_ARGS_MAX = 236
_PY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _check_var(value: str | None) -> str | None:
    if value is not None and not _PY_NAME.match(value):
        raise ValueError(f"save_var: {value!r} is not a Python variable name (letters, digits "
                         "and '_', not starting with a digit, at most 64)")
    return value


def _check_arg(value: str) -> str:
    if "\x00" in value:
        raise ValueError("arguments cannot hold NUL characters")
    return value


class RunCreate(Timing):
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
    project: Line | None = Field(
        default=None, max_length=80, description="The project it runs in (default: personal)."
    )
    group: GroupName | None = Field(default=None, description="The resource group to run in.")
    priority_class: str | None = Field(
        default=None, pattern=PRIORITY_CLASS_PATTERN,
        description="Its priority class (none: the default). A run of a lower class may be "
        "preempted: it is stopped and queued again, and its script finds its checkpoints in "
        "`save_dir` when it starts again.",
    )
    save_var: Annotated[str | None, AfterValidator(_check_var)] = Field(
        default=None,
        description="A Python script's global variable whose object, when the script ends, is "
        "saved into `save_dir` in its framework's format (PyTorch, Keras; else joblib or "
        "pickle): for scripts that keep their model in a variable and never save it.",
    )
    code_dir: str | None = Field(
        default=None, max_length=80,
        description="Its code's directory in the `runs` folder: `<name>` (the default) or, "
        "while an earlier run of the name keeps `<name>`, `<name>.2`, `<name>.3`, …",
    )

    @field_validator("save_var")
    @classmethod
    def _var_of_python(cls, value: str | None, info: ValidationInfo) -> str | None:
        script = info.data.get("script")
        if value is not None and script is not None and not script.endswith(".py"):
            raise ValueError(f"save_var: {script} is not a Python script (.py); only those "
                             "leave variables")
        return value

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
    duration_s: float | None = Field(
        description="Seconds it ran (so far, while it runs): once the script ended, its own "
        "time as measured where it ran, never counting a wait to save its output.")
    model: ModelPublic | None = Field(description="The model it saved, once saved.")


class RunSaving(BaseModel):
    """From a run's session (``gpuslice-run``): the script succeeded; saving its output
    starts."""

    script_s: float = Field(ge=0, le=10**9, description="Seconds the script itself ran.")
    waited_s: float = Field(
        default=0, ge=0, le=10**9,
        description="Seconds it waited for the platform to come back before it could say so.")


class RunSavingAck(BaseModel):
    duration_s: float = Field(description="The run's duration from now on.")
