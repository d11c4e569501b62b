"""SQLite connections for the async engine: one hop to the connection's thread per statement.

aiosqlite runs each call on the connection's own thread, and SQLAlchemy's adapter makes three
or four such calls per statement: a cursor, the execute, the fetch (of a result) and the
cursor's close. Each hop wakes that thread, then the event loop: about 45 us of CPU on uvloop
on a 2-core machine, where the statement itself takes a microsecond or two. A session's life
through `gpuslice up` ran about 180 hops, roughly 40 statements.

Here a statement is one hop: the cursor is made, run, read (up to ``CHUNK`` rows) and closed
on the thread. Only a result longer than that keeps its cursor open, to be read on by later
hops (a streamed backup reads a table that way, never all of it at once). Commit and rollback
make no hop when no transaction is open: SQLite would do nothing then, and the pool rolls back
every connection it takes back, most of them after a commit or after reads alone.

The connection is aiosqlite's own (its thread, its queue, its close and stop), so SQLAlchemy's
``sqlite+aiosqlite`` dialect drives it unchanged; only its cursor differs.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiosqlite

CHUNK = 512  # rows read in the statement's own hop; a longer result is read on by more hops


class Connection(aiosqlite.Connection):
    async def cursor(self) -> Cursor:  # type: ignore[override]  # SQLAlchemy's calls only
        return Cursor(self)

    async def commit(self) -> None:
        if self.in_transaction:
            await super().commit()

    async def rollback(self) -> None:
        if self.in_transaction:
            await super().rollback()

    async def on_thread(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """``work(connection)`` on the connection's thread, in one hop."""
        # aiosqlite's own queue to its thread (untyped there)
        return await self._execute(lambda: work(self._conn))  # type: ignore[no-untyped-call]


def connector(database: str, **kwargs: Any) -> Callable[[], Awaitable[Connection]]:
    """What SQLAlchemy's ``async_creator`` calls: a new connection to ``database``, opened
    with ``sqlite3.connect``'s ``kwargs``."""

    async def connect() -> Connection:
        connection = Connection(lambda: sqlite3.connect(database, **kwargs), iter_chunk_size=64)
        connection._thread.daemon = True  # as SQLAlchemy makes aiosqlite's: never holds exit
        await connection  # starts its thread, which opens the database
        return connection

    return connect


class Cursor:
    """The part of a DB-API cursor that SQLAlchemy's aiosqlite adapter calls, each execute
    one hop with its first ``CHUNK`` rows."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._open: sqlite3.Cursor | None = None  # rows remain beyond ``_rows``
        self._rows: deque[Any] = deque()
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Cursor:
        await self._run(lambda cursor: cursor.execute(sql, () if parameters is None
                                                      else parameters))
        return self

    async def executemany(self, sql: str, parameters: Any) -> Cursor:
        await self._run(lambda cursor: cursor.executemany(sql, parameters))
        return self

    async def fetchall(self) -> list[Any]:
        rows = list(self._rows)
        self._rows.clear()
        if self._open is not None:
            rows += await self._connection.on_thread(lambda _: self._read(None))
        return rows

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        size = size or self.arraysize
        while len(self._rows) < size and self._open is not None:
            self._rows.extend(await self._connection.on_thread(lambda _: self._read(CHUNK)))
        return [self._rows.popleft() for _ in range(min(size, len(self._rows)))]

    async def fetchone(self) -> Any:
        rows = await self.fetchmany(1)
        return rows[0] if rows else None

    async def close(self) -> None:
        self._rows.clear()
        if self._open is not None:
            await self._connection.on_thread(lambda _: self._read(0))

    async def _run(self, statement: Callable[[sqlite3.Cursor], object]) -> None:
        def run(connection: sqlite3.Connection) -> list[Any]:
            cursor = connection.cursor()
            try:
                statement(cursor)
                self.description = cursor.description
                self.rowcount, self.lastrowid = cursor.rowcount, cursor.lastrowid
                self._open = cursor
                return self._read(CHUNK) if cursor.description else self._read(0)
            except BaseException:
                cursor.close()
                self._open = None
                raise

        if self._open is not None:  # a cursor executed again: its old result is dropped
            await self.close()
        self._rows = deque(await self._connection.on_thread(run))

    def _read(self, limit: int | None) -> list[Any]:
        """On the connection's thread: up to ``limit`` more rows (all with ``None``, none
        with 0), closing the cursor once it has no more."""
        cursor = self._open
        assert cursor is not None
        rows = [] if limit == 0 else cursor.fetchall() if limit is None else cursor.fetchmany(
            limit)
        if limit is None or limit == 0 or len(rows) < limit:
            cursor.close()
            self._open = None
        return rows
