"""Restoring a backup: all of it into an empty database, or nothing.

The target is made at the backup's revision by the migrations, filled table by table in the
file's (foreign-key) order, then brought to this code's head by the migrations, so a backup of an
older release comes up to date on the way in. Never half-done:

- PostgreSQL: everything (dropping what `--force` replaces, the schema, the rows, the sequences,
  the upgrade) is one transaction, under the migrations' advisory lock; any error rolls it back.
- SQLite: the new database is built in a private temporary file beside the target and renamed
  over it only when complete; any error removes the temporary file and leaves the target as it
  was.

Nothing is written before the backup's MAC matches its key (`keys.py`; the file is read
through once for that, and the MAC is checked again as it is restored). The file areas
(`members.py`) are read after the rows, before the database is committed:
extracted into staging directories with every hash checked, then renamed into place once the
database is; any error removes the staging and leaves the targets as they were.

A target that holds rows (or directories that hold files) is refused unless ``force``; a live
database is refused always: on PostgreSQL other connected clients (a running manager), on
SQLite a manager's hold on ``<database>.in-use`` (`db/in_use.py`), which the restore keeps
exclusively until its files are in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Dialect,
    MetaData,
    Table,
    TypeDecorator,
    column,
    event,
    func,
    insert,
    select,
)
from sqlalchemy import table as table_clause
from sqlalchemy import text as sql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from gpuslice.manager.backup import keys, members
from gpuslice.manager.backup.dump import BATCH, VERSION_TABLE, Progress, safe_url, sqlite_path
from gpuslice.manager.backup.fileformat import BackupError, Header, Reader, TableInfo, decoder
from gpuslice.manager.backup.keys import BackupKey
from gpuslice.manager.backup.members import FileProgress
from gpuslice.manager.db import in_use, migrate

Then = Callable[[], Awaitable[None]]  # runs after the rows, before the database is committed


async def restore(
    path: Path, url: str, key: BackupKey | Path, *, trust_unsigned: bool = False,
    force: bool = False, targets: Mapping[str, Path] | None = None,
    progress: Progress | None = None, file_progress: FileProgress | None = None,
) -> Header:
    """Restore the backup at ``path`` into the database at ``url`` and its file areas into
    ``targets`` (area name → directory; ``None``: the database alone, the files only checked);
    returns its header. Its MAC is checked under ``key`` (or the key file it names) before
    anything is written (an unsigned one is refused unless ``trust_unsigned``); files are
    staged and checked first, put in place last. A restored data directory without a backup
    key gets the one the backup was checked with."""
    reader = Reader(path, key, trust_unsigned=trust_unsigned)
    staged: list[tuple[Path, Path, bool]] = []  # (staging, target, merge)
    try:
        header = reader.header
        if not migrate.known(header.revision):
            raise BackupError(
                f"the backup is at schema revision {header.revision}, which this gpuslice "
                f"does not know (it knows up to {migrate.head()}): restore it with the release "
                f"that made it ({header.gpuslice_version}) or a newer one"
            )
        _check_targets(header, targets, force)

        async def files() -> None:
            await asyncio.to_thread(_read_areas, reader, targets, staged, file_progress)

        backend = make_url(url).get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise BackupError(f"restores support SQLite and PostgreSQL, not {backend}")
        # SQLite: no manager may have the database open, nor open it until the files are placed
        held = _hold(sqlite_path(url)) if backend == "sqlite" else None
        try:
            if backend == "sqlite":
                await _into_sqlite(reader, sqlite_path(url), force, progress, files)
            else:
                await _into_postgres(reader, url, force, progress, files)
            for staging, target, merge in staged:
                members.place(staging, target, merge)
            staged.clear()
            if reader.key is not None and targets is not None and "data" in targets:
                keys.keep(reader.key, keys.default_key_file(targets["data"]))
        finally:
            in_use.release(held)
        return header
    finally:
        reader.close()
        for staging, _target, _merge in staged:  # not placed: an error came first
            members.remove(staging)


def verify(path: Path, key: BackupKey | Path, *, trust_unsigned: bool = False,
           progress: Progress | None = None,
           file_progress: FileProgress | None = None) -> Header:
    """Check the backup's MAC under ``key``, then read it whole, decode every value and check
    every file's hash and place, writing nothing."""
    reader = Reader(path, key, trust_unsigned=trust_unsigned)
    try:
        done = 0
        for info in reader.header.tables:
            decoders = [decoder(c.kind, True) for c in info.columns]
            for values in reader.rows(info):
                _decoded(info, decoders, values)
                done += 1
            if progress is not None:
                progress(info.name, done, reader.header.total_rows)
        _read_areas(reader, None, [], file_progress)
        return reader.header
    finally:
        reader.close()


def _check_targets(header: Header, targets: Mapping[str, Path] | None, force: bool) -> None:
    """Before anything is written: what the areas would replace needs ``force``."""
    if targets is None:
        return
    found: list[str] = []
    for area in header.areas:
        target = targets.get(area.name)
        if target is None or area.external is not None or not area.entries:
            continue
        if area.name == "data":  # merged with the database's directory: its own names only
            found += [str(target / n) for n in members.conflicts(target, set(area.top))]
        elif members.conflicts(target, None):
            found.append(f"{target} is not empty")
    if found and not force:
        raise BackupError(f"the backup's files would replace what is there ({', '.join(found)})"
                          ": restore into a fresh data directory, or add --force to replace it")


def _read_areas(reader: Reader, targets: Mapping[str, Path] | None,
                staged: list[tuple[Path, Path, bool]],
                file_progress: FileProgress | None) -> None:
    total = sum(a.bytes for a in reader.header.areas)
    for area in reader.header.areas:
        target = targets.get(area.name) if targets is not None else None
        if target is None:
            members.extract(reader, area, None, file_progress, total)
            continue
        merge = area.name == "data"
        staging = (target / ".restoring-data") if merge else members.staging_for(target)
        members.remove(staging)  # a previous restore's, interrupted
        staged.append((staging, target, merge))
        members.extract(reader, area, staging, file_progress, total)
    reader.finish()


# ------------------------------------------------------------ the two engines


async def _into_postgres(reader: Reader, url: str, force: bool, progress: Progress | None,
                         then: Then) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await _refuse_other_clients(conn, url)
            async with conn.begin():
                await conn.run_sync(_clear, url, force)
                await _load(conn, reader, progress, then)
    except (OSError, SQLAlchemyError) as exc:
        raise BackupError(f"restore into {safe_url(url)} failed, nothing was changed: "
                          f"{_reason(exc)}") from None
    finally:
        await engine.dispose()


def _hold(database: Path) -> int:
    try:
        return in_use.hold(database, exclusive=True)
    except in_use.InUse as err:
        raise BackupError(str(err)) from None


async def _into_sqlite(
    reader: Reader, target: Path, force: bool, progress: Progress | None, then: Then
) -> None:
    if target.exists():
        rows = await _sqlite_rows(target)
        if rows and not force:
            raise _not_empty(str(target), rows)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    building = target.with_name(f".{target.name}.restoring")
    building.unlink(missing_ok=True)
    building.touch(mode=0o600)  # it holds password hashes, environments and logs
    engine = create_async_engine(f"sqlite+aiosqlite:///{building}", poolclass=NullPool)
    event.listen(engine.sync_engine, "connect", _foreign_keys)
    try:
        async with engine.begin() as conn:
            await _load(conn, reader, progress, then)
        await engine.dispose()
        _replace_sqlite(building, target)
    except (OSError, SQLAlchemyError) as exc:
        raise BackupError(f"restore into {target} failed, nothing was changed: "
                          f"{_reason(exc)}") from None
    finally:
        await engine.dispose()
        building.unlink(missing_ok=True)


# ------------------------------------------------------------ loading


async def _load(conn: AsyncConnection, reader: Reader, progress: Progress | None,
                then: Then) -> None:
    header = reader.header
    await conn.run_sync(migrate.upgrade_on, header.revision)
    tables = await conn.run_sync(_reflect, header)
    done = 0
    for info in header.tables:
        target = tables[info.name]
        statement = insert(_insertable(target, info))
        decoders = [decoder(c.kind, _has_timezone(target, c.name)) for c in info.columns]
        batch: list[dict[str, Any]] = []
        for values in reader.rows(info):
            batch.append(_decoded(info, decoders, values))
            if len(batch) >= BATCH:
                await conn.execute(statement, batch)
                done += len(batch)
                batch = []
                if progress is not None:
                    progress(info.name, done, header.total_rows)
        if batch:
            await conn.execute(statement, batch)
            done += len(batch)
        if progress is not None:
            progress(info.name, done, header.total_rows)
    await then()  # the file areas and the end marker, read before anything is committed
    if conn.dialect.name == "postgresql":
        await conn.run_sync(_reset_sequences, tables.values())
    await conn.run_sync(migrate.upgrade_on, "head")


def _reflect(connection: Connection, header: Header) -> dict[str, Table]:
    metadata = MetaData()
    metadata.reflect(connection)
    tables = {name: t for name, t in metadata.tables.items() if name != VERSION_TABLE}
    ours = {t.name for t in header.tables}
    if ours != set(tables):
        raise BackupError(
            f"the backup's tables do not match revision {header.revision} here (only in the "
            f"backup: {_names(ours - set(tables))}; only here: {_names(set(tables) - ours)})"
        )
    for info in header.tables:
        want, have = [c.name for c in info.columns], set(tables[info.name].columns.keys())
        if set(want) != have:
            raise BackupError(
                f"table {info.name} of the backup does not match revision {header.revision} "
                f"here (only in the backup: {_names(set(want) - have)}; only here: "
                f"{_names(have - set(want))})"
            )
    return tables


class _JsonText(TypeDecorator[str]):
    """A JSON column written from JSON text as it is: not serialised again, None is SQL NULL
    (JSON null is the text ``null``), and PostgreSQL still gets a json-typed parameter."""

    impl = JSON
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> None:
        return None


def _insertable(target: Table, info: TableInfo) -> Any:
    # JSON columns take the text the backup holds (see fileformat); every other column its
    # reflected type.
    return table_clause(target.name, *[
        column(c.name, _JsonText() if c.kind == "json" else target.c[c.name].type)
        for c in info.columns
    ])


def _decoded(info: TableInfo, decoders: list[Callable[[Any], Any]],
             values: list[Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for col, decode, value in zip(info.columns, decoders, values, strict=True):
        try:
            row[col.name] = None if value is None else decode(value)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise BackupError(f"table {info.name}, column {col.name}: {value!r} is not a valid "
                              f"{col.kind} ({exc})") from None
    return row


def _has_timezone(table: Table, name: str) -> bool:
    return bool(getattr(table.c[name].type, "timezone", False))


def _reset_sequences(connection: Connection, tables: Any) -> None:
    """PostgreSQL: serial columns go on after the restored ids, not from 1."""
    for table in tables:
        for col in table.primary_key.columns:
            sequence = connection.execute(
                sql("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table.name, "c": col.name}
            ).scalar()
            if sequence is None:
                continue
            top = connection.execute(select(func.coalesce(func.max(col), 0))).scalar()
            connection.execute(sql("SELECT setval(CAST(:s AS regclass), :v, false)"),
                               {"s": sequence, "v": int(top or 0) + 1})


# ------------------------------------------------------------ the target


def _clear(connection: Connection, url: str, force: bool) -> None:
    """Empty the target in this transaction: refuse rows unless ``force``, drop every table."""
    metadata = MetaData()
    metadata.reflect(connection)
    rows = {t.name: n for t in metadata.sorted_tables if t.name != VERSION_TABLE
            if (n := connection.execute(select(func.count()).select_from(t)).scalar())}
    if rows and not force:
        raise _not_empty(safe_url(url), rows)
    metadata.drop_all(connection)


async def _refuse_other_clients(conn: AsyncConnection, url: str) -> None:
    found = (await conn.execute(sql(
        "SELECT coalesce(nullif(application_name, ''), client_addr::text, 'local'), count(*) "
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend' GROUP BY 1 ORDER BY 1"
    ))).all()
    await conn.rollback()  # the restore's own transaction begins after this look
    if found:
        clients = ", ".join(f"{n} from {who}" for who, n in found)
        raise BackupError(
            f"{safe_url(url)} is in use ({clients} connection(s)): stop every manager using "
            "it, then restore"
        )


async def _sqlite_rows(path: Path) -> dict[str, int]:
    def count() -> dict[str, int]:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != ?", (VERSION_TABLE,))]
            return {n: c for n in names
                    if (c := db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0])}
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"{path} is not an SQLite database ({exc}); remove it or "
                              "choose another target") from None
        finally:
            db.close()

    return await asyncio.to_thread(count)


def _replace_sqlite(building: Path, target: Path) -> None:
    """Put the complete new database in place of the old one (and its WAL), atomically."""
    if target.exists():
        # Fold the old database's write-ahead log into it and let SQLite remove it: a WAL
        # left beside the new file would be replayed into it.
        with contextlib.closing(sqlite3.connect(target)) as old:
            old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    os.replace(building, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _not_empty(where: str, rows: dict[str, int]) -> BackupError:
    held = ", ".join(f"{n} {t}" for t, n in sorted(rows.items())[:5])
    return BackupError(f"{where} is not empty ({held}{', …' if len(rows) > 5 else ''}): "
                       "restore into an empty database, or add --force to replace it")


def _foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _names(names: set[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).splitlines()[0][:300]
