"""What ``gpuslice admin ldap test`` shows: the directory as gpuslice's service account sees
it, and what gpuslice would do with a user."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LdapTestResult(BaseModel):
    url: str = Field(description="The directory asked (auth.ldap.url).")
    user: str | None = Field(default=None, description="The user name looked up, if any.")
    found: bool | None = Field(default=None, description="Whether one entry has that name.")
    dn: str | None = None
    subject: str | None = Field(default=None, description="The id gpuslice links the user by.")
    groups: list[str] = Field(default_factory=list)
    locked: bool | None = Field(default=None, description="Locked or disabled at the directory.")
    allowed: bool | None = Field(default=None, description="In an allowed group (or allow_all).")
    admin: bool | None = Field(
        default=None, description="Would be an admin (null: admin_groups unset, the role stays "
        "what an admin sets).")
    projects: list[str] = Field(default_factory=list,
                                description="Projects linked to one of the user's groups.")
