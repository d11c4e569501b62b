"""Backups and restores: every table, every row, across engines, all or nothing.

The source is a running manager (the `app` fixture, on SQLite or on GPUSLICE_TEST_PG) with users,
a policy, tokens, an alias, a node and sessions in several statuses. Each restore is compared
with the source row by row, table by table (read by reflection, not through the code under test),
and a manager started on the restored database must accept the old API token.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Connection, MetaData

from gpuslice.manager.app import create_app
from gpuslice.manager.backup import BackupError, backup, restore, verify
from gpuslice.manager.backup.keys import BackupKey, load_or_create
from gpuslice.manager.backup.members import Area
from gpuslice.manager.db import migrate
from gpuslice.manager.db.base import Base
from gpuslice.manager.db.engine import make_engine
from gpuslice.manager.settings import ManagerSettings
from tests.conftest import new_pg_database, pg_url
from tests.manager.backup_helpers import signed
from tests.manager.conftest import AgentFactory, Client, UserFactory, client_for, create
from tests.manager.db_contents import contents
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_until

# The audit log's sealer would seal rows between a backup and the source's contents read
# after it; tests/manager/test_audit_backup.py checks a restored chain.
pytestmark = pytest.mark.loops_off("audit_seal")


@pytest.fixture
def key(tmp_path: Path) -> BackupKey:
    return load_or_create(tmp_path / "keys" / "backup-key")[0]


@pytest.fixture
async def populated(
    app: FastAPI, admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> dict[str, Any]:
    """A manager with something in every table a cluster fills."""
    await make_agent("node-1", devices=[gpu(0)], fgpu_per_gpu=2)
    alice = await make_user("alice", policy={"max_sessions": 5, "max_gpu": 4})
    bob = await make_user("bob")
    token = (await alice.post("/api/v1/auth/tokens", json={"name": "ci"})).json()["token"]
    assert (await admin.post("/api/v1/images/aliases",
                             json={"name": "py", "reference": "python:3.11"})).status_code == 201
    assert (await admin.post("/api/v1/join-tokens", json={"name": "spare"})).status_code == 201
    # a project with a member and a folder, and a node in a resource group (issue 32)
    assert (await admin.post("/api/v1/projects", json={"name": "vision", "max_gpu": 8,
                                                       "groups": ["a100"]})).status_code == 201
    await admin.post("/api/v1/projects/vision/members", json={"username": "alice"})
    assert (await admin.post("/api/v1/folders", json={"name": "images", "project": "vision"})
            ).status_code == 201
    await admin.put("/api/v1/nodes/node-1/group", json={"group": "a100"})
    assert (await admin.post("/api/v1/priority-classes", json={
        "name": "vision-high", "rank": 5, "projects": ["vision"]})).status_code == 201
    ended = (await create(bob, resources={"gpu": 0, "cpu": 1, "mem": "1g"}))[0]["id"]
    await wait_until(bob, [ended], lambda s: s[0]["status"] == "RUNNING")
    await bob.post("/api/v1/sessions/destroy", json={"ids": [ended]})
    await wait_until(bob, [ended], lambda s: s[0]["status"] == "TERMINATED")
    ids = [s["id"] for s in await create(alice, count=3, env={"K": "v"}, command=None,
                                         resources={"gpu": 1, "cpu": 1, "mem": "1g"},
                                         project="vision")]
    states = await wait_until(alice, ids, lambda s: sum(x["status"] == "RUNNING" for x in s) == 2)
    pending = next(s["id"] for s in states if s["status"] == "PENDING")
    cancelled = (await create(bob, resources={"gpu": 0, "cpu": 1, "mem": "1g"}))[0]["id"]
    await bob.post("/api/v1/sessions/destroy", json={"ids": [cancelled]})
    statuses = {(await admin.get(f"/api/v1/sessions/{i}")).json()["status"]
                for i in [*ids, ended, cancelled]}
    assert statuses == {"RUNNING", "PENDING", "TERMINATED", "CANCELLED"}
    return {"token": token, "pending": pending, "ended": ended, "ids": ids}


async def test_a_backup_restores_every_row_of_every_table(
    populated: dict[str, Any], settings: ManagerSettings, tmp_path: Path, key: BackupKey
) -> None:
    source = settings.database_url
    file = tmp_path / "cluster.gsbackup"
    header = (await backup(source, file, key, settings={"nodes": {"node_timeout": 30}})).header
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert {t.name for t in header.tables} >= set(Base.metadata.tables)  # every model's table
    assert header.revision == migrate.head() and header.settings["nodes"]["node_timeout"] == 30
    before = await contents(source)
    assert all(before[name] for name in ("users", "sessions", "status_history", "allocations",
                                         "api_tokens", "image_aliases", "resource_policies",
                                         "projects", "project_members",
                                         "priority_class_projects"))

    target = f"sqlite+aiosqlite:///{tmp_path / 'restored.db'}"
    restored = await restore(file, target, key)
    assert restored.total_rows == sum(len(rows) for rows in before.values())
    assert await contents(target) == before

    # a manager on the restored database: the old API token works, sessions are all there
    fresh = create_app(settings.model_copy(update={"database": settings.database.model_copy(
        update={"url": target})}))
    async with fresh.router.lifespan_context(fresh), client_for(fresh, populated["token"]) as c:
        listed = (await c.get("/api/v1/sessions")).json()["items"]
        assert {s["id"] for s in listed} >= set(populated["ids"])
        pending = (await c.get(f"/api/v1/sessions/{populated['pending']}")).json()
        assert pending["status"] == "PENDING"


@pytest.mark.pg
@pytest.mark.skipif(pg_url() is None, reason="needs GPUSLICE_TEST_PG")
async def test_postgresql_to_sqlite_and_back(
    populated: dict[str, Any], settings: ManagerSettings, tmp_path: Path, key: BackupKey
) -> None:
    """The way from one machine to a cluster and back: PG → SQLite → PG, equal all along."""
    server = pg_url()
    assert server is not None and settings.database_url.startswith("postgresql")
    before = await contents(settings.database_url)
    await backup(settings.database_url, tmp_path / "pg.gsbackup", key)
    lite = f"sqlite+aiosqlite:///{tmp_path / 'lite.db'}"
    await restore(tmp_path / "pg.gsbackup", lite, key)
    assert await contents(lite) == before
    await backup(lite, tmp_path / "lite.gsbackup", key)
    async with new_pg_database(server) as again:
        await restore(tmp_path / "lite.gsbackup", again, key)
        assert await contents(again) == before
        # serial ids go on after the restored ones
        fresh = create_app(settings.model_copy(update={"database": settings.database.model_copy(
            update={"url": again})}))
        async with fresh.router.lifespan_context(fresh), client_for(
                fresh, populated["token"]) as alice:
            await create(alice, resources={"gpu": 0, "cpu": 1, "mem": "1g"})


async def test_a_non_empty_database_is_refused_unless_forced(
    populated: dict[str, Any], settings: ManagerSettings, tmp_path: Path, key: BackupKey
) -> None:
    file = tmp_path / "b.gsbackup"
    await backup(settings.database_url, file, key)
    target = f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"
    await _one_user_database(target, tmp_path)
    with pytest.raises(BackupError, match=r"is not empty \(1 users\).*--force"):
        await restore(file, target, key)
    await restore(file, target, key, force=True)
    assert await contents(target) == await contents(settings.database_url)


async def test_a_damaged_backup_changes_nothing(
    populated: dict[str, Any], settings: ManagerSettings, tmp_path: Path, key: BackupKey
) -> None:
    file = tmp_path / "b.gsbackup"
    await backup(settings.database_url, file, key)
    lines = gzip.decompress(file.read_bytes()).decode().splitlines(keepends=True)
    cut = tmp_path / "cut.gsbackup"
    cut.write_bytes(gzip.compress("".join(lines[:-3]).encode()))  # the last rows are missing
    target = f"sqlite+aiosqlite:///{tmp_path / 'kept.db'}"
    await _one_user_database(target, tmp_path)
    kept = await contents(target)
    with pytest.raises(BackupError, match="is damaged: it ends before"):
        await restore(cut, target, key, force=True)
    assert await contents(target) == kept
    assert [p.name for p in tmp_path.iterdir() if "restoring" in p.name] == []
    with pytest.raises(BackupError, match="is damaged"):
        verify(cut, key)
    bad = tmp_path / "bad.gsbackup"
    rows = [json.loads(line) for line in lines]
    users = next(i for i, t in enumerate(rows[0]["tables"]) if t["name"] == "users")
    first_user_row = 1 + sum(t["rows"] for t in rows[0]["tables"][:users])
    created_at = [c["name"] for c in rows[0]["tables"][users]["columns"]].index("created_at")
    rows[first_user_row][created_at] = "yesterday"
    bad.write_bytes(signed([json.dumps(r) + "\n" for r in rows], key))
    with pytest.raises(BackupError, match="column created_at: 'yesterday' is not a valid "
                                          "datetime"):
        await restore(bad, target, key, force=True)
    assert await contents(target) == kept
    with pytest.raises(BackupError, match="not a gpuslice backup"):
        await restore(tmp_path / "kept.db", target, key)


async def test_a_backup_of_the_previous_revision_comes_up_to_head(
    tmp_path: Path, database_url: str, key: BackupKey
) -> None:
    previous = migrate.previous(migrate.head())
    assert previous is not None
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, previous)
        async with engine.begin() as conn:
            await conn.run_sync(_insert_user_at_any_revision)
    finally:
        await engine.dispose()
    file = tmp_path / "old.gsbackup"
    header = (await backup(database_url, file, key)).header
    assert header.revision == previous
    target = f"sqlite+aiosqlite:///{tmp_path / 'new.db'}"
    await restore(file, target, key)
    check = make_engine(target)
    try:
        async with check.connect() as conn:
            assert await conn.run_sync(migrate.current_on) == migrate.head()
            names = (await conn.exec_driver_sql("SELECT username FROM users")).scalars().all()
            assert names == ["old-timer"]
    finally:
        await check.dispose()


async def test_an_unknown_revision_is_refused(tmp_path: Path, database_url: str,
                                              key: BackupKey) -> None:
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()
    file = tmp_path / "b.gsbackup"
    await backup(database_url, file, key)
    lines = gzip.decompress(file.read_bytes()).decode().splitlines(keepends=True)
    header = json.loads(lines[0]) | {"revision": "zz_future"}
    lines[0] = json.dumps(header) + "\n"
    file.write_bytes(signed(lines, key))
    with pytest.raises(BackupError, match="revision zz_future, which this gpuslice does not know"):
        await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", key)


# ------------------------------------------------------------ helpers


async def _one_user_database(url: str, tmp_path: Path) -> None:
    engine = make_engine(url)
    try:
        await migrate.upgrade(engine)
        async with engine.begin() as conn:
            await conn.run_sync(_insert_user_at_any_revision)
    finally:
        await engine.dispose()


def _insert_user_at_any_revision(connection: Connection) -> None:
    metadata = MetaData()
    metadata.reflect(connection, only=["users"])
    connection.execute(metadata.tables["users"].insert().values(
        id="00000000-0000-0000-0000-000000000001", username="old-timer", password_hash="x",
        role="user", is_active=True, created_at=datetime.now(UTC),
    ))


async def test_a_file_deleted_while_the_backup_runs_is_left_out_and_the_rest_restores(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    root = tmp_path / "storage"
    (root / "a").mkdir(parents=True)
    first, second = os.urandom(3 * 1024**2), os.urandom(100)
    (root / "a" / "1.bin").write_bytes(first)
    (root / "a" / "2.bin").write_bytes(second)
    (root / "b.txt").write_text("deleted while the backup runs\n")
    (root / "link").symlink_to("a/2.bin")
    seen: list[str] = []

    def on_bytes(path: str, done: int, total: int) -> None:
        if not seen:  # the first chunk of a/1.bin is written: b.txt goes before it is read
            (root / "b.txt").unlink()
        seen.append(path)

    file = tmp_path / "b.gsbackup"
    taken = await backup(migrated_database_url, file, key, areas=[Area("storage", root)],
                         file_progress=on_bytes)
    assert taken.gone == 1 and taken.header.areas[0].entries == 5
    assert verify(file, key).areas[0].bytes == len(first) + len(second) + 30
    target = tmp_path / "restored"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                  targets={"storage": target})
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
        "a", "a/1.bin", "a/2.bin", "link"]
    assert (target / "a" / "1.bin").read_bytes() == first
    assert os.readlink(target / "link") == "a/2.bin"


async def test_files_are_refused_where_files_are_unless_forced(
    migrated_database_url: str, tmp_path: Path, key: BackupKey
) -> None:
    root = tmp_path / "storage"
    root.mkdir()
    (root / "x").write_text("backed up\n")
    file = tmp_path / "b.gsbackup"
    await backup(migrated_database_url, file, key, areas=[Area("storage", root)])
    (root / "x").write_text("changed since\n")
    with pytest.raises(BackupError, match=rf"would replace what is there \({root} is not empty"):
        await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", key,
                      targets={"storage": root})
    assert (root / "x").read_text() == "changed since\n"
    await restore(file, f"sqlite+aiosqlite:///{tmp_path / 'r2.db'}", key,
                  targets={"storage": root}, force=True)
    assert (root / "x").read_text() == "backed up\n"
    assert [p.name for p in tmp_path.iterdir() if "restoring" in p.name or "replaced" in p.name
            ] == []
