"""The engine's SQLite connections (db/sqlite.py): one hop to the connection's thread per
statement, none for a commit or rollback with no transaction open, and results, row counts,
errors and rollbacks exactly as SQLite gives them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gpuslice.manager.db import engine as engines
from gpuslice.manager.db.sqlite import CHUNK


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    made = engines.make_engine(f"sqlite+aiosqlite:///{tmp_path / 'hops.db'}")
    async with made.begin() as conn:
        await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)"))
    yield made
    await made.dispose()


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call run on a connection's thread, by name."""
    seen: list[str] = []
    real = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(getattr(fn, "__name__", "call"))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return seen


async def test_a_statement_is_one_hop_and_an_idle_reset_none(
    engine: AsyncEngine, hops: list[str]
) -> None:
    async with engine.connect() as conn:  # pooled already: no connect hops
        await conn.execute(text("INSERT INTO t (v) VALUES ('a')"))
        rows = (await conn.execute(text("SELECT v FROM t"))).all()
        await conn.commit()
    # aiosqlite under SQLAlchemy's adapter: a cursor, the execute, the fetch (a SELECT) and
    # the close per statement, the commit, and a rollback as the pool takes it back: 9
    assert len(hops) == 3 and [tuple(r) for r in rows] == [("a",)]
    hops.clear()
    async with engine.connect() as conn:  # reads alone: no transaction, nothing to end
        await conn.execute(text("SELECT count(*) FROM t"))
        await conn.commit()
    assert len(hops) == 1


async def test_row_counts_returning_and_generated_ids(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        first = await conn.execute(text("INSERT INTO t (v) VALUES ('x')"))
        assert first.lastrowid == 1
        await conn.execute(text("INSERT INTO t (v) VALUES (:v)"), [{"v": "y"}, {"v": "z"}])
        guarded = await conn.execute(text("UPDATE t SET v = v || '!' WHERE id > 1"))
        assert guarded.rowcount == 2  # what the guarded updates of the allocation count on
        missed = await conn.execute(text("UPDATE t SET v = 'no' WHERE id > 100"))
        assert missed.rowcount == 0
        returned = await conn.execute(text("DELETE FROM t WHERE id >= 2 RETURNING v"))
        assert sorted(returned.scalars()) == ["y!", "z!"]
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1


@pytest.mark.parametrize("count", [CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7])
async def test_long_results_whole_and_streamed(engine: AsyncEngine, count: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (v) VALUES (:v)"),
                           [{"v": f"r{i}"} for i in range(count)])
    async with engine.connect() as conn:
        whole = (await conn.execute(text("SELECT v FROM t ORDER BY id"))).scalars().all()
        streamed: list[str] = []
        result = await conn.stream(text("SELECT v FROM t ORDER BY id"))
        async for part in result.partitions(100):
            streamed += [row[0] for row in part]
        one = await conn.stream(text("SELECT v FROM t ORDER BY id"))
        first = await one.fetchone()
        await one.close()  # left unread: its cursor is closed, the connection goes on
        after = (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one()
    expected = [f"r{i}" for i in range(count)]
    assert whole == expected and streamed == expected
    assert first is not None and first[0] == "r0" and after == count


async def test_errors_and_rollbacks_are_sqlites(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (v) VALUES ('kept')"))
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO t (v) VALUES ('undone')"))
        with pytest.raises(IntegrityError, match="UNIQUE"):
            await conn.execute(text("INSERT INTO t (v) VALUES ('kept')"))
        await conn.rollback()
        assert (await conn.execute(text("SELECT v FROM t"))).scalars().all() == ["kept"]
    async with engine.connect() as conn:  # a transaction left open ends with the connection
        await conn.execute(text("INSERT INTO t (v) VALUES ('dropped')"))
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT v FROM t"))).scalars().all() == ["kept"]
