"""Taking a backup: one consistent snapshot of a running database, written as a portable file.

SQLite: the online backup API copies the live database (WAL included) into a private temporary
file in one step, so the copy is one consistent state however busy the manager is; the rows are
read from that copy. PostgreSQL: one REPEATABLE READ, READ ONLY transaction reads the schema
revision, the tables and every row from the same snapshot. Which tables: every table of the
database at its revision (reflected, in foreign-key order), never a hand-written list; at the
code's head they must include every table of the models.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table, Text, cast, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from gpuslice.manager.backup import members
from gpuslice.manager.backup.fileformat import (
    FORMAT,
    FORMAT_VERSION,
    BackupError,
    ColumnInfo,
    Header,
    TableInfo,
    Writer,
    encode,
    kind_of,
)
from gpuslice.manager.backup.keys import BackupKey
from gpuslice.manager.backup.members import Area, FileProgress
from gpuslice.manager.db import migrate
from gpuslice.manager.db.base import Base

Progress = Callable[[str, int, int], None]  # (table, rows done so far in all, rows in all)
BATCH = 1000
VERSION_TABLE = "alembic_version"


@dataclass(frozen=True, slots=True)
class Taken:
    """What a backup wrote: its header, and entries deleted while it ran (left out)."""

    header: Header
    gone: int


async def backup(
    url: str, path: Path, key: BackupKey, *, settings: dict[str, Any] | None = None,
    areas: Sequence[Area] = (), progress: Progress | None = None,
    file_progress: FileProgress | None = None,
) -> Taken:
    """Write a backup of the database at ``url`` and of ``areas`` to ``path`` (complete, or
    not there at all), signed with ``key`` (which is never in it). The database is one
    snapshot; the files are read after it."""
    async with snapshot(url) as conn:
        try:
            return await _write(conn, url, path, key, settings, areas, progress,
                                file_progress)
        except SQLAlchemyError as exc:
            raise BackupError(f"cannot read {safe_url(url)}: {_reason(exc)}") from None


async def _write(
    conn: AsyncConnection, url: str, path: Path, key: BackupKey, settings: dict[str, Any] | None,
    areas: Sequence[Area], progress: Progress | None, file_progress: FileProgress | None,
) -> Taken:
    revision = await conn.run_sync(migrate.current_on)
    if revision is None:
        raise BackupError(f"{safe_url(url)} holds no gpuslice database (never migrated)")
    tables = await conn.run_sync(_tables, revision)
    skip = frozenset({path.absolute(), Writer(path.absolute(), key).partial,
                      key.source.absolute()})
    walked = [members.walk(replace(a, skip=a.skip | skip)) for a in areas]
    header = Header(
        format=FORMAT, format_version=FORMAT_VERSION, created_at=datetime.now(UTC),
        gpuslice_version=_version(), revision=revision, source=conn.dialect.name,
        tables=[await _describe(conn, t) for t in tables], settings=settings or {},
        areas=[a.info() for a in walked], key_id=key.id,
    )
    total_bytes = sum(a.bytes for a in header.areas)
    gone = 0
    with Writer(path, key) as out:
        out.header(header)
        for table, info in zip(tables, header.tables, strict=True):
            await _copy_rows(conn, table, info, out, header.total_rows, progress)
        for area in walked:
            gone += await asyncio.to_thread(members.write_area, area, out, file_progress,
                                            total_bytes)
        out.finish()
    return Taken(header, gone)


@asynccontextmanager
async def snapshot(url: str) -> AsyncIterator[AsyncConnection]:
    """A connection that sees one consistent state of the database at ``url``, read-only."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        source = sqlite_path(url)
        if not source.is_file():
            raise BackupError(f"there is no database at {source}")
        with tempfile.TemporaryDirectory(prefix="gpuslice-backup-") as tmp:  # mode 0700
            copy = Path(tmp) / "snapshot.db"
            await asyncio.to_thread(_online_backup, source, copy)
            engine = create_async_engine(f"sqlite+aiosqlite:///{copy}", poolclass=NullPool)
            try:
                async with engine.connect() as conn:
                    yield conn
            finally:
                await engine.dispose()
        return
    if backend != "postgresql":
        raise BackupError(f"backups support SQLite and PostgreSQL, not {backend}")
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            reading = await conn.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            async with reading.begin():
                yield reading
    except (OSError, SQLAlchemyError) as exc:
        raise BackupError(f"cannot read {safe_url(url)}: {_reason(exc)}") from None
    finally:
        await engine.dispose()


def sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        raise BackupError(f"{url}: backups need an SQLite database file")
    return Path(database).expanduser()


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def _online_backup(source: Path, target: Path) -> None:
    # pages=-1 (the default): the whole database in one step, under one read lock, so a
    # concurrent writer cannot make the copy restart or mix two states.
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
            # The copy is page for page: a damaged page of the source is in it. Say so now,
            # in one line, rather than fail on some row halfway through the file.
            problems = [r[0] for r in dst.execute("PRAGMA quick_check(3)")]
        finally:
            dst.close()
    except sqlite3.Error as exc:
        if "malformed" in str(exc) or "not a database" in str(exc):
            raise _damaged(source, str(exc)) from None
        raise BackupError(f"cannot copy {source}: {exc}") from None
    finally:
        src.close()
    if problems != ["ok"]:
        raise _damaged(source, "; ".join(problems))


def _damaged(source: Path, detail: str) -> BackupError:
    detail = " ".join(detail.replace("*** in database main ***", "").split())  # one line
    return BackupError(f"{source} is damaged ({detail[:300]}): no backup was written; restore "
                       "the last good backup, or salvage what is left with `sqlite3 DB .recover`")


def _tables(connection: Any, revision: str) -> list[Table]:
    metadata = MetaData()
    metadata.reflect(connection)
    tables = [t for t in metadata.sorted_tables if t.name != VERSION_TABLE]
    if revision == migrate.head():
        missing = set(Base.metadata.tables) - {t.name for t in tables}
        if missing:
            raise BackupError(
                f"the database is at revision {revision} but lacks table(s) "
                f"{', '.join(sorted(missing))}: it was not made by gpuslice's migrations"
            )
    return tables


async def _describe(conn: AsyncConnection, table: Table) -> TableInfo:
    count = await conn.scalar(select(func.count()).select_from(table))
    columns = [ColumnInfo(name=c.name, kind=kind_of(c.type, f"column {table.name}.{c.name}"))
               for c in table.columns]
    return TableInfo(name=table.name, columns=columns, rows=count or 0)


async def _copy_rows(
    conn: AsyncConnection, table: Table, info: TableInfo, out: Writer, total: int,
    progress: Progress | None,
) -> None:
    # JSON columns are read as their text (a CAST: drivers parse JSON otherwise), so SQL NULL
    # and JSON null are told apart and nothing is re-serialised on the way
    columns = [cast(table.c[c.name], Text) if c.kind == "json" else table.c[c.name]
               for c in info.columns]
    kinds = [c.kind for c in info.columns]
    order = list(table.primary_key.columns) or list(table.columns)
    result = await conn.stream(select(*columns).order_by(*order))
    written = 0
    async for batch in result.partitions(BATCH):
        for row in batch:
            out.row([encode(kind, value) for kind, value in zip(kinds, row, strict=True)])
        written += len(batch)
        if progress is not None:
            progress(table.name, out.rows, total)
    if written != info.rows:  # cannot happen within one snapshot; refuse a wrong file anyway
        raise BackupError(f"table {table.name} changed while it was read ({written} rows, "
                          f"{info.rows} counted)")


def _version() -> str:
    try:
        return version("gpuslice")
    except PackageNotFoundError:
        return "unknown"


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return text[:300]
