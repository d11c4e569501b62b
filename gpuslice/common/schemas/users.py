"""Users, login and API tokens, resource policies (quotas)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from gpuslice.common.schemas.common import CpuIn, FgpuIn, MemIn, Number
from gpuslice.common.schemas.monitoring import MAX_SECONDS, IdleRule
from gpuslice.common.text import Line

USERNAME_PATTERN = r"^[a-z_][a-z0-9_.-]{0,63}$"


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"


class LoginRequest(BaseModel):
    username: Line = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class TokenPublic(BaseModel):
    """A bearer token, shown once: send it as `Authorization: Bearer <token>`."""

    access_token: str
    token_type: str = "bearer"
    expires_at: datetime | None


class CliLoginRequest(LoginRequest):
    """A password login for the CLI: the token it gives is of kind `cli`."""

    host: Line = Field(default="", max_length=48,
                       description="The machine the CLI runs on (names the token `cli@host`).")


class TokenInfo(BaseModel):
    """The token a request was made with: its kind and when it ends (never its secret)."""

    id: str
    kind: str = Field(description="login (console, 12 h), cli (gpuslice login) or api.")
    name: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None = Field(description="The absolute end; null: none.")
    idle_seconds: int | None = Field(
        description="It ends after this many seconds unused (cli tokens); null: no idle limit.")
    idle_expires_at: datetime | None = Field(
        description="When it ends if it is not used before then (cli tokens).")


class ApiTokenCreate(BaseModel):
    name: Line = Field(min_length=1, max_length=64)
    expires_in_days: int | None = Field(
        default=None, ge=1, le=3650, description="Omit for a token that lasts until revoked."
    )


class ApiTokenPublic(BaseModel):
    id: str
    name: str
    kind: str = Field(default="api", description="api (`gpuslice token create`) or cli "
                      "(`gpuslice login` on a machine: its name says which).")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    status: str = Field(default="active", description="active or expired.")


class ApiTokenCreated(ApiTokenPublic):
    token: str = Field(description="The secret; it is shown only in this answer.")


class UserCreate(BaseModel):
    username: str = Field(pattern=USERNAME_PATTERN)
    password: str = Field(min_length=8, max_length=1024)
    role: Role = Role.USER
    policy_id: str | None = None


class PasswordChange(BaseModel):
    """Change one's own password: every other login ends (API tokens too, unless kept)."""

    current_password: str = Field(min_length=1, max_length=1024)
    new_password: str = Field(min_length=8, max_length=1024)
    keep_api_tokens: bool = Field(
        default=False, description="Keep your API tokens working (scripts, the SDK)."
    )


class UserUpdate(BaseModel):
    password: str | None = Field(
        default=None, min_length=8, max_length=1024,
        description="A new password: the user's logins end (API tokens too, unless kept).",
    )
    keep_api_tokens: bool = Field(
        default=False, description="With a new password: keep the user's API tokens working."
    )
    role: Role | None = None
    is_active: bool | None = None
    policy_id: str | None = Field(default=None, description="Set to attach a policy.")
    clear_policy: bool = Field(default=False, description="Detach the policy (unlimited).")


class UserPublic(BaseModel):
    id: str
    username: str
    role: Role
    is_active: bool
    policy_id: str | None
    created_at: datetime
    source: str = Field(default="local", description="Where the user signs in: local (a "
                        "gpuslice password), ldap (the directory) or oidc (single sign-on).")
    disabled_reason: str | None = Field(
        default=None, description="Why is_active is false: admin, or directory: ... (the "
        "directory's re-check enables its own again).")
    standing_until: datetime | None = Field(
        default=None, description="A single sign-on user's API and CLI tokens answer "
        "sso_required after this, unless they sign in again before (auth.oidc.offline_max_age "
        "after the last sign-in or re-check at the provider); null: no such bound.")


class PolicyCreate(BaseModel):
    """Limits on what one user's allocated sessions may hold together; omit a field = no limit."""

    name: Line = Field(min_length=1, max_length=64)
    max_sessions: int | None = Field(default=None, ge=0, le=100_000)
    max_gpu: FgpuIn | None = None
    max_cpu: CpuIn | None = None
    max_mem: MemIn | None = None
    max_priority: int = Field(default=0, ge=-100, le=100, description="Highest priority allowed.")
    max_private_images: int | None = Field(
        default=None, ge=0, le=100_000, description="Private images (session commits) at once."
    )
    idle: IdleRule | None = Field(default=None, description="Reclaim idle sessions (none: never).")
    max_lifetime: int | None = Field(
        default=None, ge=1, le=MAX_SECONDS,
        description="Seconds a session may run before it is reclaimed (none: no limit).",
    )
    max_storage: MemIn | None = Field(
        default=None, description="Bytes one's own storage folders may hold, e.g. 100g."
    )
    max_pending: int | None = Field(
        default=None, ge=0, le=100_000,
        description="PENDING sessions waiting at once (omit: the manager's sessions.max_pending).",
    )


class PolicyUpdate(BaseModel):
    """Replace a policy's limits (all of them)."""

    max_sessions: int | None = Field(default=None, ge=0, le=100_000)
    max_gpu: FgpuIn | None = None
    max_cpu: CpuIn | None = None
    max_mem: MemIn | None = None
    max_priority: int = Field(default=0, ge=-100, le=100)
    max_private_images: int | None = Field(default=None, ge=0, le=100_000)
    idle: IdleRule | None = None
    max_lifetime: int | None = Field(default=None, ge=1, le=MAX_SECONDS)
    max_storage: MemIn | None = None
    max_pending: int | None = Field(default=None, ge=0, le=100_000)


class PolicyPublic(BaseModel):
    id: str
    name: str
    max_sessions: int | None
    max_gpu: Number | None
    max_cpu: Number | None
    max_mem: int | None
    max_priority: int
    max_private_images: int | None = None
    idle: IdleRule | None = None
    max_lifetime: int | None = None
    max_storage: int | None = None
    max_pending: int | None = None
    created_at: datetime
