"""Reading the audit log straight from the test's database."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from sqlalchemy import select

from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.loop_table import run_once


async def rows(app: FastAPI, **where: Any) -> list[AuditRow]:
    """The audit rows whose columns equal ``where``, oldest first."""
    async with app.state.sessionmaker() as db:
        query = select(AuditRow).order_by(AuditRow.seq)
        for name, value in where.items():
            query = query.where(getattr(AuditRow, name) == value)
        return list((await db.scalars(query)).all())


async def seal(app: FastAPI) -> None:
    """Seal every row committed so far (the sealer loop's pass, now)."""
    await run_once(app, "audit_seal")
