"""What the health endpoints answer (load balancers and service managers read them)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class Liveness(BaseModel):
    """The process answers; nothing else is checked (restart it only when this fails)."""

    status: Literal["ok"] = "ok"


class Check(BaseModel):
    ok: bool
    detail: str = Field(description="What was found, e.g. `revision 0009 (head)`.")


class Readiness(BaseModel):
    """Whether this replica should get traffic: every check must pass (503 otherwise)."""

    status: Literal["ready", "not_ready"]
    checks: dict[str, Check] = Field(
        description="`database` (reachable), `migrations` (at this code's head), `scheduler` "
        "and `node_sweep` (their loops go round)."
    )


class LoopHealth(BaseModel):
    """One background loop of this replica: what it did last."""

    ok: bool = Field(description="It goes round and has not failed 3 passes in a row.")
    detail: str = Field(description="The problem, e.g. `node sweep failed 3 times in a row "
                        "(OperationalError; …)`, or `ran 0.4 s ago (12 passes)`.")
    running: bool = Field(description="Started with the manager (false: left off, it runs "
                          "only when asked).")
    readiness: bool = Field(description="Readiness waits on it.")
    interval: float = Field(description="Seconds between its passes.")
    passes: int = Field(description="Passes that succeeded.")
    failures: int = Field(description="Passes that failed in a row (0: the last succeeded).")
    last_error: str | None = Field(description="The exception type of the last failed pass, "
                                   "kept after it recovers (its text is in the log only).")
    last_pass_at: datetime | None = Field(description="When the last pass ended, either way.")


class LoopsHealth(BaseModel):
    """Every background loop of this replica (`failing` when any is not ok); answered 200."""

    status: Literal["ok", "failing"]
    loops: dict[str, LoopHealth]
