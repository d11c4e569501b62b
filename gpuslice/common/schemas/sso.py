"""Single sign-on and device sign-in (issue 42): what the login page, the CLI and the SDK read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SignInMethod(BaseModel):
    name: str = Field(description="password, oidc or ldap.")
    kind: Literal["password", "oidc", "ldap"]
    display_name: str
    start_url: str | None = Field(
        default=None, description="Where a browser starts the sign-in (oidc).")


class SignInMethods(BaseModel):
    """How one may sign in to this manager (public: the login page and the CLI read it)."""

    methods: list[SignInMethod]
    device_login: bool = Field(description="gpuslice login --sso --device is possible.")


class DeviceStart(BaseModel):
    """What the CLI says about itself; the approving user sees it before approving."""

    client_host: str = Field(min_length=1, max_length=255, description="The CLI's host name.")
    os_user: str = Field(min_length=1, max_length=255, description="The CLI's OS user.")


class DeviceCode(BaseModel):
    device_code: str = Field(description="The CLI's secret to poll with.")
    user_code: str = Field(description="What the user types on the /device page (XXXX-XXXX).")
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int = Field(description="Seconds between polls (slow_down adds 5).")


class DeviceTokenRequest(BaseModel):
    device_code: str = Field(min_length=1, max_length=128)


class DeviceToken(BaseModel):
    access_token: str
    token_type: str = "bearer"
    expires_at: str


class DeviceDecision(BaseModel):
    user_code: str = Field(min_length=1, max_length=16, description="As shown by the CLI.")
    approve: bool = Field(description="true: the CLI gets a token as you; false: refused.")


class DeviceRequestPublic(BaseModel):
    """A pending device sign-in as the approving user sees it."""

    user_code: str
    client_host: str
    os_user: str
    client_ip: str | None
    age_seconds: int


class CliTokenRequest(BaseModel):
    """The CLI's loopback sign-in: the code its listener got, and its PKCE verifier."""

    code: str = Field(min_length=1, max_length=128)
    code_verifier: str = Field(min_length=43, max_length=128)
