"""The model store: trained models under each user's own prefix.

A model is a named set of files (a save directory, or one file) owned by one user. Each save
of a name is a new version (1, 2, …; never a replacement): ``resnet`` means its latest version,
``resnet:1`` the first. From inside a session the store
is reached through the in-session endpoint only (short-lived URLs or streamed through the
agent); users reach it through the manager's API.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from gpuslice.common.storage_paths import clean_path

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MODEL_NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
MAX_MODEL_FILES = 10_000
MAX_PRESIGN_TTL = 3600
_VERSION_RE = re.compile(r"^[1-9][0-9]{0,8}$")
REF_RULE = "NAME (its latest version) or NAME:VERSION, e.g. resnet:2"


def check_model_name(value: str) -> str:
    if not MODEL_NAME_RE.match(value) or value in (".", ".."):
        raise ValueError(f"model name {value!r}: use {MODEL_NAME_RULE}")
    return value


def split_ref(ref: str) -> tuple[str, int | None]:
    """``resnet`` → (resnet, None: the latest); ``resnet:2`` → (resnet, 2). A name holds no
    ``:``, so the split is never ambiguous; ``ValueError`` saying the rule otherwise."""
    name, sep, version = ref.partition(":")
    if not sep:
        return name, None
    if not _VERSION_RE.match(version):
        raise ValueError(f"model {ref!r}: the version after ':' is a number from 1 (no "
                         f"leading 0); use {REF_RULE}")
    return name, int(version)


def check_model_ref(value: str) -> str:
    name, _ = split_ref(value)
    check_model_name(name)
    return value


def check_file_path(value: str) -> str:
    return clean_path(value)  # a PathRuleError is a ValueError: pydantic names the rule


ModelName = Annotated[str, AfterValidator(check_model_name)]
ModelRef = Annotated[str, AfterValidator(check_model_ref)]
FilePath = Annotated[str, AfterValidator(check_file_path)]


class ModelFile(BaseModel):
    path: FilePath = Field(description="Relative to the model, e.g. `model.txt`, `ckpt/1.pt`.")
    size: int = Field(ge=0, le=5 * 1024**4, description="Bytes.")


class ModelPublic(BaseModel):
    """One saved version of a model."""

    id: str
    name: str
    version: int = Field(description="1 for the first save of the name, then 2, 3, …")
    ref: str = Field(description="NAME:VERSION, what names exactly this version.")
    latest: bool = Field(description="Whether it is the newest version of its name (what the "
                         "bare name means).")
    owner_id: str
    size: int = Field(description="Bytes of all its files.")
    files: int
    saved_at: datetime
    session_id: str | None = Field(description="The session (run) that saved it, if any.")
    session_name: str | None = None


class ModelDetail(ModelPublic):
    file_list: list[ModelFile]


class ModelDeleted(BaseModel):
    """What a delete removed: these versions of ``name``, with their files."""

    name: str
    versions: list[int]


class ModelUploadStart(BaseModel):
    """Begin saving a model: its name and the files that will make it up."""

    name: ModelName
    files: list[ModelFile] = Field(min_length=1, max_length=MAX_MODEL_FILES)


class ModelUploadStarted(BaseModel):
    """How to send the files: to the store directly (``presigned``: one URL per file, PUT the
    bytes before ``expires_at``, exactly the size announced, once, with ``headers``) or
    through the caller's own channel (``stream``)."""

    upload_id: str
    name: str
    mode: Literal["presigned", "stream"]
    urls: dict[str, str] = Field(default_factory=dict, description="File path → PUT URL.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Headers every PUT must carry (signed into the "
        "URLs: a PUT without them is refused).")
    expires_at: datetime | None = None


class ModelUploadComplete(BaseModel):
    upload_id: str = Field(min_length=1, max_length=64)


class ModelPresign(BaseModel):
    """Short-lived download URLs for the files of one of the caller's models."""

    name: ModelRef = Field(description=f"The model: {REF_RULE}.")
    ttl: int = Field(default=300, ge=1, le=MAX_PRESIGN_TTL, description="Seconds they last.")


class ModelUrls(BaseModel):
    name: str
    version: int
    urls: dict[str, str] = Field(description="File path → GET URL.")
    expires_at: datetime
