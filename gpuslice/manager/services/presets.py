"""Resource presets: admin-defined CPU/memory/GPU sets, readable by every user, one of them the
default the launch dialog preselects.

A new platform gets the default "small" (0.25 CPU, 1 GiB, the GPU left to the slider) with
its first admin; an upgraded one from migration 0022. Small on purpose: the guide's scenario,
sessions asked for by their GPU slice alone, is then limited by the GPU, not by the CPU or
memory of a small node (a 2-core machine offers 1.5 cores to sessions).

Invariant: at most one preset is the default (making one the default clears the others in the
same transaction). A preset only fills in the dialog's fields: a session is checked and
scheduled on what it asks for, exactly as one typed by hand.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.resources import fgpu_decimal
from gpuslice.common.schemas.presets import PresetCreate, PresetPublic, PresetUpdate
from gpuslice.manager.db.models import ResourcePresetRow
from gpuslice.manager.errors import Conflict, NotFound

# milli-cores, bytes, milli-fGPU
DEFAULT = {"name": "small", "cpu": 250, "mem": 1024**3, "gpu": 0}


def add_default(db: AsyncSession) -> None:
    """Add the platform's default preset (a new platform's first start)."""
    db.add(ResourcePresetRow(**DEFAULT, is_default=True))


async def list_presets(db: AsyncSession) -> list[PresetPublic]:
    """Every preset, the default first, then by name."""
    rows = await db.scalars(select(ResourcePresetRow).order_by(
        ResourcePresetRow.is_default.desc(), ResourcePresetRow.name))
    return [public(row) for row in rows]


async def create_preset(db: AsyncSession, body: PresetCreate) -> PresetPublic:
    if body.default:
        await _clear_default(db)
    row = ResourcePresetRow(name=body.name, cpu=body.cpu, mem=body.mem, gpu=body.gpu,
                            is_default=body.default)
    db.add(row)
    try:
        await db.commit()
    except IntegrityError:
        await db.rollback()
        raise Conflict(f"preset {body.name!r} already exists", field="name",
                       code="preset_exists") from None
    return public(row)


async def update_preset(db: AsyncSession, name: str, body: PresetUpdate) -> PresetPublic:
    row = await _get(db, name)
    for key in ("cpu", "mem", "gpu"):
        value = getattr(body, key)
        if value is not None:
            setattr(row, key, value)
    if body.default is not None:
        if body.default:
            await _clear_default(db)
        row.is_default = body.default
    await db.commit()
    return public(row)


async def delete_preset(db: AsyncSession, name: str) -> None:
    await db.delete(await _get(db, name))
    await db.commit()


def public(row: ResourcePresetRow) -> PresetPublic:
    return PresetPublic(id=row.id, name=row.name, cpu=fgpu_decimal(row.cpu), mem=row.mem,
                        gpu=fgpu_decimal(row.gpu), default=row.is_default,
                        created_at=row.created_at)


async def _clear_default(db: AsyncSession) -> None:
    await db.execute(update(ResourcePresetRow).where(ResourcePresetRow.is_default.is_(True))
                     .values(is_default=False))


async def _get(db: AsyncSession, name: str) -> ResourcePresetRow:
    row = await db.scalar(select(ResourcePresetRow).where(ResourcePresetRow.name == name))
    if row is None:
        raise NotFound(f"no preset {name!r} (GET /api/v1/presets lists them)", field="name",
                       code="unknown_preset")
    return row
