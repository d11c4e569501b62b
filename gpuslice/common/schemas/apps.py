"""Apps in a session as users see them: the terminal every session has, and its image's apps
(Jupyter, MLflow, TensorBoard, ...), each reached through the manager's proxy."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpuslice.common.schemas.agents import AppState


class AppPublic(BaseModel):
    name: str
    protocol: str = Field(description="`tty` for the terminal; the image's for its apps.")
    port: int | None = Field(description="Where the app listens inside the container.")
    state: AppState
    url: str = Field(description="Where a browser opens it (after logging in).")
    exit_code: int | None = Field(default=None, description="`failed`: the app's exit code.")
    logs: str = Field(default="", description="`failed`: the app's last lines of output.")
    message: str = Field(default="", description="Why it is in this state.")
    process: str = Field(default="", description="The process listening on its port, if any.")
    command: str = Field(default="", description="That process's command line.")
    discovered: bool = Field(
        default=False, description="A port a process in the session serves that no app of "
        "its image declares (its name is the port's number).")


class AppList(BaseModel):
    session_id: str
    apps: list[AppPublic]
