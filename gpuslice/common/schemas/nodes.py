"""What admins see of nodes and send to let them join: node views and join tokens.

The agent wire protocol (what an agent sends with a join token, its heartbeats) is in
``gpuslice.common.schemas.agents``; a node's name and status are defined there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from gpuslice.common.schemas.agents import NODE_NAME, NodeStatus
from gpuslice.common.schemas.common import Number
from gpuslice.common.text import Line


class JoinTokenCreate(BaseModel):
    """A single-use token an agent registers its node with (``gpuslice admin token create``)."""

    name: Line = Field(min_length=1, max_length=64, description="What the token is for.")
    node: str | None = Field(
        default=None, pattern=NODE_NAME,
        description="Only a node of this name may register with it.",
    )
    rekey: bool = Field(
        default=False,
        description="It may re-register the existing node `node` (required with it): the "
        "node gets a new credential and its old one stops working. An admin's re-key, for a "
        "node that lost its credential or was revoked.",
    )
    expires_in_hours: int = Field(default=1, ge=1, le=24 * 30)

    @field_validator("rekey")
    @classmethod
    def _rekey_names_its_node(cls, rekey: bool, info: ValidationInfo) -> bool:
        if rekey and info.data.get("node") is None:
            raise ValueError("a re-key token names the node it re-keys (node)")
        return rekey


class JoinTokenPublic(BaseModel):
    id: str
    name: str
    node: str | None = Field(default=None, description="The node name it is bound to, if any.")
    rekey: bool = False
    created_at: datetime
    expires_at: datetime | None
    used_at: datetime | None = Field(default=None, description="When a node registered with it.")
    status: Literal["active", "used", "expired", "revoked"] = Field(
        default="active", description="active (it may still admit a node: the one state that "
        "can be revoked), used, expired or revoked.",
    )


class JoinTokenCreated(JoinTokenPublic):
    token: str = Field(description="The secret; it is shown only in this answer.")


class NodePublic(BaseModel):
    id: str
    name: str
    pool: str
    status: NodeStatus
    revoked_at: datetime | None = None
    cpu: Number
    mem: int
    cpu_used: Number
    mem_used: int
    fgpu_per_gpu: Number
    devices: list[DevicePublic]
    images: list[str]
    last_heartbeat_at: datetime | None
    registered_at: datetime
    engine_error: str | None = Field(
        default=None, description="Why the node's Docker Engine does not answer, if it does not."
    )


class DevicePublic(BaseModel):
    index: int
    uuid: str
    model: str
    mem: int
    sms: int
    capacity: Number = Field(description="fGPU.")
    used: Number = Field(description="fGPU allocated.")


NodePublic.model_rebuild()
