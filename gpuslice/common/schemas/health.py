"""What the health endpoints answer (load balancers and service managers read them)."""

from __future__ import annotations

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
