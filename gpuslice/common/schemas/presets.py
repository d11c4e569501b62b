"""Resource presets: named CPU/memory/GPU sets the launch dialog offers (admins define them)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel, Field

from gpuslice.common.schemas.common import CpuIn, FgpuIn, Number, SessionMemIn

PRESET_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class PresetCreate(BaseModel):
    """A preset: what a session gets when a user picks it (the GPU slider may still change)."""

    name: str = Field(pattern=PRESET_PATTERN, description="e.g. `small`.")
    cpu: CpuIn = Field(description="CPU cores, e.g. 0.25.")
    mem: SessionMemIn = Field(description="Memory, e.g. 1g.")
    gpu: FgpuIn = Field(default=0, description="fGPU, e.g. 0.5 (0: the user's slider decides).")
    default: bool = Field(default=False, description="The one the dialog preselects.")


class PresetUpdate(BaseModel):
    """Change some of a preset's values (omitted ones are kept)."""

    cpu: CpuIn | None = None
    mem: SessionMemIn | None = None
    gpu: FgpuIn | None = None
    default: bool | None = Field(default=None, description="true: make it the default.")


class PresetPublic(BaseModel):
    id: str
    name: str
    cpu: Number = Field(description="CPU cores.")
    mem: int = Field(description="Bytes.")
    gpu: Number = Field(default=Decimal(0), description="fGPU.")
    default: bool = False
    created_at: datetime
