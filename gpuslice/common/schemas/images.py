"""The image catalog: what images there are, who may use them, aliases, commits."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel, Field

from gpuslice.common.schemas.common import Number

ALIAS_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class ImageCreate(BaseModel):
    """Put an image on the admin allow list (it is public and always accepted)."""

    name: str = Field(min_length=1, max_length=255, pattern=r"^[^\s]+$")


class ImageUpdate(BaseModel):
    public: bool = Field(description="Make a private image public (or public again private).")


class ImageAppPublic(BaseModel):
    name: str
    protocol: str
    port: int


class ImagePublic(BaseModel):
    """One catalog image as the caller may see it."""

    name: str = Field(description="The reference, e.g. `python:3.11`.")
    sources: list[str] = Field(
        description="`allowed` (admin list), `registry` and/or node names having it."
    )
    title: str = ""
    frameworks: dict[str, str] = Field(default_factory=dict)
    image_id: str | None = None
    size: int | None = Field(default=None, description="Bytes, as its node reports it.")
    apps: list[ImageAppPublic] = Field(default_factory=list)
    gpu: bool = Field(default=False, description="Whether the image can use a GPU.")
    cpu_only: bool = Field(
        default=False, description="The image says it cannot use a GPU (its gpu label is "
        "false): a GPU slice on it would be allocated and unused. An image that says nothing "
        "is not CPU-only.",
    )
    min_gpu: Number = Field(default=Decimal(0), description="Least fGPU a session may ask for.")
    min_cpu: Number = Field(default=Decimal(0), description="Least CPU cores.")
    min_mem: int = Field(default=0, description="Least memory in bytes.")
    public: bool = True
    owner: str | None = Field(default=None, description="Username owning a private image.")
    origin_session: str | None = Field(default=None, description="Session it was committed from.")
    nodes: list[str] = Field(default_factory=list, description="Alive nodes that have it.")
    aliases: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    kind: str = Field(
        default="other", description="`standard` (the default session image), `framework`, "
        "`private` (a user's own), `other`, or `internal` / `test`: usable by name but not "
        "offered in the launch dialog's list.",
    )


class ImageUpdated(ImagePublic):
    """An image after an admin changed its visibility."""

    exposes: str | None = Field(
        default=None, description="When made public: what every user can now read and run."
    )


class ImageAliasCreate(BaseModel):
    name: str = Field(pattern=ALIAS_PATTERN, description="The short name, e.g. `tf2`.")
    reference: str = Field(min_length=1, max_length=255)


class ImageAliasPublic(BaseModel):
    name: str
    reference: str
    created_at: datetime


class ImageRescan(BaseModel):
    nodes: int = Field(description="Alive nodes asked to report their images at once.")
    registry: int | None = Field(
        default=None, description="Images found in the configured registry (none configured: "
        "null).",
    )


class SessionCommit(BaseModel):
    """Snapshot a RUNNING session's container into a new private image."""

    name: str = Field(
        min_length=1, max_length=255,
        description="`repository[:tag]` of the new image; the tag defaults to the session's name.",
    )


class SessionCommitResult(BaseModel):
    session_id: str
    image: ImagePublic
    note: str = Field(description="What the image does not hold (storage folders).")
