"""The record of a completed backup, in the backed-up database itself.

`gpuslice admin backup` reads the database directly rather than through a manager, so it is the
one to say that it succeeded: a row in ``backups`` once the file is complete and in place.
Every manager replica reads the newest for ``/metrics``
(``gpuslice_backup_last_success_timestamp_seconds``). A database at a revision without the
table (an older release's) is backed up all the same, unrecorded.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from gpuslice.manager.backup.fileformat import Header
from gpuslice.manager.db.models import BackupRow


async def record(url: str, header: Header, size: int, database_only: bool) -> str | None:
    """Record the backup's success; ``None``, or why it could not be recorded (one line)."""
    args = {"timeout": 30} if make_url(url).get_backend_name() == "sqlite" else {}
    engine = create_async_engine(url, poolclass=NullPool, connect_args=args)
    row = {"finished_at": datetime.now(UTC), "rows": header.total_rows,
           "entries": header.total_entries, "bytes": size, "database_only": database_only}
    try:
        async with engine.begin() as conn:
            tables = await conn.run_sync(lambda c: inspect(c).get_table_names())
            if BackupRow.__tablename__ not in tables:
                return "the database predates the record of backups (upgrade the managers)"
            await conn.execute(insert(BackupRow), [row])
    except (OSError, SQLAlchemyError) as exc:
        return str(getattr(exc, "orig", None) or exc).splitlines()[0][:300]
    finally:
        await engine.dispose()
    return None
