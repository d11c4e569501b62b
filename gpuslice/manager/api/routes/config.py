"""The platform's configuration as one JSON document (admins): export, and import (merge)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpuslice.common.schemas.config import ConfigDocument, ConfigImportResult
from gpuslice.manager.api.deps import AdminUser, DbDep
from gpuslice.manager.services import config

router = APIRouter(prefix="/config", tags=["config"])


@router.get("")
async def export_config(
    db: DbDep,
    _admin: AdminUser,
    password_hashes: Annotated[bool, Query(description="Include users' password hashes.")] = (
        False
    ),
) -> ConfigDocument:
    """Policies, users (without password hashes unless asked), image aliases and the image
    catalog's curation, by name (admins only)."""
    return await config.export_config(db, password_hashes=password_hashes)


@router.post("/import")
async def import_config(
    body: ConfigDocument,
    db: DbDep,
    _admin: AdminUser,
    dry_run: Annotated[bool, Query(description="Check and count, change nothing.")] = False,
) -> ConfigImportResult:
    """Merge a configuration document by name, all or nothing; importing it again changes
    nothing (admins only)."""
    return await config.import_config(db, body, dry_run=dry_run)
