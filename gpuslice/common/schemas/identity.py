"""An account's sign-ins at identity providers (OIDC, LDAP): what admins link and see."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Provider = Literal["oidc", "ldap"]


class IdentityLink(BaseModel):
    """Link an account to a provider's user: their OIDC ``sub`` or directory ``entryUUID``."""

    model_config = ConfigDict(extra="forbid")

    provider: Provider
    subject: str = Field(min_length=1, max_length=255,
                         description="The provider's id of the user (OIDC sub, entryUUID).")


class IdentityPublic(BaseModel):
    id: str
    provider: Provider
    subject: str
    claimed_username: str
    groups: list[str] | None = Field(
        description="What the provider said at the last sign-in or re-check; null: nothing.")
    created_at: datetime
    last_login_at: datetime | None
