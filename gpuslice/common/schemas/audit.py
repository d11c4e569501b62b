"""The audit log as the API answers it (``GET /api/v1/audit``, ``/auth/activity``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEvent(BaseModel):
    """One row of the audit log."""

    id: str
    at: datetime
    actor_type: str = Field(description="user, node, system or anonymous.")
    actor_id: str | None
    actor_name: str | None
    via: str | None = Field(description="The credential: login_token, api_token, node, system.")
    action: str = Field(description="What was done, `domain.verb` (auth.login, session.create).")
    outcome: str = Field(description="success, failure or denied.")
    reason: str | None = Field(description="Why it failed or was denied (an error code).")
    target_type: str | None
    target_id: str | None
    source_ip: str | None
    user_agent: str | None
    request_id: str | None
    details: dict[str, Any] | None = Field(description="What changed (field names, counts).")
    seal_pos: int | None = Field(description="Its place in the hash chain (null: not sealed "
                                             "yet, within a second or so).")


class AuditPage(BaseModel):
    """One page of the audit log, newest first."""

    items: list[AuditEvent]
    limit: int
    next: str | None = Field(default=None, description="Give it as `after` for the next page; "
                             "null on the last page.")


class AuditVerify(BaseModel):
    """Whether the hash chain is intact, and where it breaks if not."""

    intact: bool
    sealed_through: int = Field(description="The last position checked.")
    unsealed: int = Field(description="Rows written but not sealed yet.")
    head_pos: int
    head_hash: str
    first_break: int | None = Field(description="The first position that does not hold.")
    problem: str | None = Field(description="What is wrong there, in words.")
