"""Retention: rows older than ``audit.retention_days`` are archived, then purged.

A purge takes the oldest sealed rows (a bounded batch, a prefix of the chain: it stops at the
first row that is young enough), appends them to ``<archive_dir>/audit-<year>.jsonl`` (mode
0600, synced) and then, in one transaction, writes an ``audit.purge`` row naming the last
position purged and its hash (the checkpoint ``chain.verify`` starts from), and deletes the
rows under the ``audit_state.purging`` guard the triggers ask for. A crash between the two
steps archives some rows twice (same ``id`` and ``seal_pos``); none is lost.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.manager.db.audit_models import AuditRow, AuditStateRow
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.services.audit.chain import _time
from gpuslice.manager.services.audit.record import record

BATCH = 1000
PURGE = "audit.purge"


async def purge(sessionmaker: async_sessionmaker[AsyncSession], days: int, archive: Path,
                now: datetime | None = None) -> int:
    """Archive and purge one batch of rows older than ``days``; how many (0: none due)."""
    if days <= 0:
        return 0
    cutoff = (now or utcnow()) - timedelta(days=days)
    async with sessionmaker() as db:
        rows = (await db.scalars(select(AuditRow).where(AuditRow.seal_pos.is_not(None))
                                 .order_by(AuditRow.seal_pos).limit(BATCH))).all()
        due = []
        for row in rows:
            if row.at >= cutoff:
                break
            due.append(row)
        await db.commit()
        db.expunge_all()  # the rows are deleted below by statement, not through the session
        if not due:
            return 0
        _append(archive, due)
        last = due[-1]
        await db.execute(update(AuditStateRow).where(AuditStateRow.id == 1).values(purging=1))
        await db.execute(delete(AuditRow).where(AuditRow.seal_pos <= last.seal_pos)
                         .execution_options(synchronize_session=False))
        await db.execute(update(AuditStateRow).where(AuditStateRow.id == 1).values(purging=0))
        record(db, PURGE, actor="system:retention", details={
            "through_pos": last.seal_pos, "through_hash": last.hash, "rows": len(due),
            "before": _time(cutoff)})
        await db.commit()
        return len(due)


def export_line(row: AuditRow) -> str:
    """One row as a JSON line (the archive's, and an export's): seal included."""
    values: dict[str, Any] = {}
    for column in AuditRow.__table__.columns:
        value = getattr(row, column.name)
        values[column.name] = _time(value) if isinstance(value, datetime) else value
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _append(archive: Path, rows: list[AuditRow]) -> None:
    archive.mkdir(mode=0o700, parents=True, exist_ok=True)
    by_year: dict[int, list[str]] = {}
    for row in rows:
        by_year.setdefault(row.at.year, []).append(export_line(row) + "\n")
    for year, lines in by_year.items():
        fd = os.open(archive / f"audit-{year}.jsonl",
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(lines))
            out.flush()
            os.fsync(out.fileno())
