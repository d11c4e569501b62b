"""The Alembic tree is tested code: upgrade head, compare with the models, downgrade base."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect
from sqlalchemy.exc import IntegrityError

from gpuslice.manager.db import migrate
from gpuslice.manager.db.base import Base, UTCDateTime, utcnow
from gpuslice.manager.db.engine import make_engine


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return compare_metadata(context, Base.metadata)


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names()) - {"alembic_version"}


async def test_upgrade_matches_models_then_downgrade(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
            assert await conn.run_sync(_tables) == set(Base.metadata.tables)
        await migrate.upgrade(engine)  # idempotent: already at head
        await migrate.downgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == set()
    finally:
        await engine.dispose()


async def test_saves_made_before_versions_become_versions_oldest_first(
    database_url: str,
) -> None:
    """0018: ready saves so far are numbered 1, 2, … per name by completion; an upload in
    progress gets its number when it completes."""
    engine = make_engine(database_url)
    users = sa.table("users", *(sa.column(c) for c in (
        "id", "username", "password_hash", "role", "is_active", "created_at")))
    models = sa.table("models", *(sa.column(c) for c in (
        "id", "owner_id", "name", "version", "status", "size", "files", "file_list",
        "created_at", "completed_at")))
    now = utcnow()
    try:
        await migrate.upgrade(engine, "0016")
        async with engine.begin() as conn:
            await conn.execute(sa.insert(users).values(
                id="u1", username="alice", password_hash="x", role="user", is_active=True,
                created_at=now))
            for mid, status, age in (("m-new", "ready", 1), ("m-old", "ready", 5),
                                     ("m-up", "uploading", 0)):
                await conn.execute(sa.insert(models).values(
                    id=mid, owner_id="u1", name="resnet", version=mid, status=status, size=1,
                    files=1, file_list="[]", created_at=now,
                    completed_at=None if status != "ready" else now - timedelta(minutes=age)))
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            got = dict((await conn.execute(sa.text("SELECT id, number FROM models"))).all())
        assert got == {"m-old": 1, "m-new": 2, "m-up": None}
    finally:
        await engine.dispose()


async def test_a_platform_in_use_gets_the_default_preset_and_a_new_one_none(
    database_url: str,
) -> None:
    """0022 (issue 34): an upgraded platform (it has users) gets the default preset "small"; a
    database only migrated stays empty (its first start adds it with the first admin), so a
    backup is restored into it with exactly its own rows."""
    engine = make_engine(database_url)
    users = sa.table("users", *(sa.column(c) for c in (
        "id", "username", "password_hash", "role", "is_active", "created_at")))
    presets = sa.table("resource_presets", sa.column("name"), sa.column("cpu"),
                       sa.column("is_default"))
    try:
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            assert (await conn.execute(sa.select(presets.c.name))).all() == []
        await migrate.downgrade(engine, "0021")
        async with engine.begin() as conn:
            await conn.execute(sa.insert(users).values(
                id="u1", username="alice", password_hash="x", role="user", is_active=True,
                created_at=utcnow()))
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            got = (await conn.execute(sa.select(presets))).all()
        assert [tuple(r) for r in got] == [("small", 250, True)]
    finally:
        await engine.dispose()


async def test_every_user_gets_a_personal_project_with_their_sessions_in_it(
    database_url: str,
) -> None:
    """0025 (issue 32): each user has a personal project ``~<username>`` after the upgrade, their
    sessions run in it, and nodes keep their resource group."""
    engine = make_engine(database_url)
    now = utcnow()
    try:
        await migrate.upgrade(engine, "0022")
        async with engine.begin() as conn:
            for uid, name in (("u1", "alice"), ("u2", "bob")):
                await conn.execute(sa.text(
                    "INSERT INTO users (id, username, password_hash, role, is_active, created_at)"
                    " VALUES (:id, :name, 'x', 'user', true, :now)"), {"id": uid, "name": name,
                                                                      "now": now})
            await conn.execute(sa.text(
                "INSERT INTO sessions (id, name, owner_id, image, type, env, priority, pool, gpu,"
                " cpu, mem, folders, status, status_reason, created_at, updated_at) VALUES "
                "('s1', 'one', 'u2', 'img', 'interactive', '{}', 0, 'default', 0, 1000, 1, '[]',"
                " 'TERMINATED', '', :now, :now)"), {"now": now})
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            projects = dict((await conn.execute(sa.text(
                "SELECT personal_of, name FROM projects"))).all())
            session = (await conn.execute(sa.text(
                "SELECT p.name, s.pool FROM sessions s JOIN projects p ON p.id = s.project_id"
            ))).all()
        assert projects == {"u1": "~alice", "u2": "~bob"}
        assert session == [("~bob", "")]  # it asked for no group: any its project may use
    finally:
        await engine.dispose()


async def test_existing_sessions_join_the_default_priority_class(database_url: str) -> None:
    """0027 (issue 32): an upgraded platform gets the default class "normal" (rank 0) and every
    session it has is in it, never preempted or queued again so far."""
    engine = make_engine(database_url)
    users = sa.table("users", *(sa.column(c) for c in (
        "id", "username", "password_hash", "role", "is_active", "created_at")))
    sessions = sa.table("sessions", *(sa.column(c) for c in (
        "id", "name", "owner_id", "image", "type", "env", "priority", "pool", "gpu", "cpu",
        "mem", "folders", "status", "status_reason", "created_at", "updated_at")))
    try:
        await migrate.upgrade(engine, "0022")
        now = utcnow()
        async with engine.begin() as conn:
            await conn.execute(sa.insert(users).values(
                id="u1", username="alice", password_hash="x", role="user", is_active=True,
                created_at=now))
            await conn.execute(sa.insert(sessions).values(
                id="s1", name="old", owner_id="u1", image="python:3.11", type="batch",
                env="{}", priority=0, pool="default", gpu=500, cpu=1000, mem=1024, folders="[]",
                status="RUNNING", status_reason="running", created_at=now, updated_at=now))
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            classes = (await conn.execute(sa.text(
                "SELECT name, rank, is_default FROM priority_classes"))).all()
            got = (await conn.execute(sa.text(
                "SELECT priority_class, preemptions, preempted_by FROM sessions"))).all()
        assert [tuple(r) for r in classes] == [("normal", 0, True)]
        assert [tuple(r) for r in got] == [("normal", 0, None)]
    finally:
        await engine.dispose()


async def test_existing_projects_keep_the_settings_time_limits(database_url: str) -> None:
    """0028 (issue 32): a project made before has no time limits of its own (NULL: the settings'
    default and maximum apply to it, as before), and the columns go on downgrade."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0027")
        async with engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO projects (id, name, description, created_at) VALUES "
                "('p1', 'vision', '', :now)"), {"now": utcnow()})
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            got = (await conn.execute(sa.text(
                "SELECT name, default_time_limit, max_time_limit FROM projects"))).all()
        assert [tuple(r) for r in got] == [("vision", None, None)]
        await migrate.downgrade(engine, "0027")
        async with engine.connect() as conn:
            columns = await conn.run_sync(
                lambda c: {col["name"] for col in inspect(c).get_columns("projects")})
            kept = (await conn.execute(sa.text("SELECT name FROM projects"))).all()
        assert "max_time_limit" not in columns and [tuple(r) for r in kept] == [("vision",)]
    finally:
        await engine.dispose()


async def test_existing_priority_classes_stay_usable_by_every_project(database_url: str) -> None:
    """0029 (issue 32): classes made before are limited to no project (every project may use
    them); the table of limits goes on downgrade and the classes stay."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0028")
        async with engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO priority_classes (id, name, rank, min_runtime_s, grace_s, "
                "preempt_interactive, is_default, created_at) VALUES "
                "('c1', 'high', 10, 0, 30, false, false, :now)"), {"now": utcnow()})
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            limits = (await conn.execute(sa.text(
                "SELECT count(*) FROM priority_class_projects"))).scalar()
        assert limits == 0
        await migrate.downgrade(engine, "0028")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
            kept = (await conn.execute(sa.text("SELECT name FROM priority_classes"))).all()
        assert "priority_class_projects" not in tables
        assert ("high",) in [tuple(r) for r in kept]
    finally:
        await engine.dispose()


async def test_classes_stored_before_grants_keep_who_may_use_them(database_url: str) -> None:
    """0033 (F8): a class limited to no project was every project's and stays so
    (``any_project``), as does the default; a limited one stays its projects'."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0031")
        async with engine.begin() as conn:
            for cid, name, default in (("c1", "open", False), ("c2", "team", False),
                                       ("c3", "normal", True)):
                await conn.execute(sa.text(
                    "INSERT INTO priority_classes (id, name, rank, min_runtime_s, grace_s, "
                    "preempt_interactive, is_default, created_at) VALUES "
                    "(:id, :name, 1, 0, 30, false, :default, :now)"),
                    {"id": cid, "name": name, "default": default, "now": utcnow()})
            await conn.execute(sa.text(
                "INSERT INTO projects (id, name, description, created_at) VALUES "
                "('p1', 'vision', '', :now)"),
                {"now": utcnow()})
            await conn.execute(sa.text(
                "INSERT INTO priority_class_projects (class_id, project_id) VALUES ('c2', 'p1')"))
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text(
                "SELECT name, any_project FROM priority_classes ORDER BY name"))).all()
            grants = (await conn.execute(sa.text(
                "SELECT class_id, project_id FROM priority_class_projects"))).all()
        assert [tuple(g) for g in grants] == [("c2", "p1")]  # kept (no table copy)
        assert [(n, bool(a)) for n, a in rows] == [
            ("normal", True), ("open", True), ("team", False)]
        await migrate.downgrade(engine, "0031")
    finally:
        await engine.dispose()


async def test_app_ports_start_empty_and_go_on_downgrade(database_url: str) -> None:
    """0030 (issue 31): no app had a port before `apps.port_range`, so the table starts empty
    (existing sessions keep their name-based origins), and it goes on downgrade."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0029")
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT port FROM app_ports"))).all()
        assert rows == []
        await migrate.downgrade(engine, "0029")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert "app_ports" not in tables and "app_entries" in tables
    finally:
        await engine.dispose()


async def test_a_projects_folders_hold_it_in_the_database(database_url: str) -> None:
    """0031: a project with a folder cannot be deleted, even by a statement that skipped the
    service's checks (its folder was cascaded away before); downgrade brings the old key."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0030")
        now = utcnow()
        async with engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO projects (id, name, description, created_at) "
                "VALUES ('p1', 'vision', '', :now)"), {"now": now})
            await conn.execute(sa.text(
                "INSERT INTO folders (id, name, scope, owner_id, project_id, created_at) "
                "VALUES ('f1', 'images', 'shared', NULL, 'p1', :now)"), {"now": now})
        await migrate.upgrade(engine)
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(sa.text("DELETE FROM projects WHERE id = 'p1'"))
        async with engine.connect() as conn:
            kept = (await conn.execute(sa.text("SELECT id FROM folders"))).all()
        assert [tuple(r) for r in kept] == [("f1",)]
        await migrate.downgrade(engine, "0030")
        async with engine.begin() as conn:
            await conn.execute(sa.text("DELETE FROM projects WHERE id = 'p1'"))
            gone = (await conn.execute(sa.text("SELECT id FROM folders"))).all()
        assert gone == []
    finally:
        await engine.dispose()


async def test_sso_users_made_before_get_30_days_of_standing(database_url: str) -> None:
    """0041 (issue 42): an SSO user made before has 30 days before their API and CLI tokens
    need a new sign-in (never: a user removed at the provider kept them); others no bound."""
    engine = make_engine(database_url)
    try:
        await migrate.upgrade(engine, "0040")
        async with engine.begin() as conn:
            for user_id, source in (("u1", "local"), ("u2", "oidc")):
                await conn.execute(sa.text(
                    "INSERT INTO users (id, username, password_hash, role, is_active, "
                    "created_at, source, email_verified) VALUES (:id, :id, '!', 'user', "
                    "true, :now, :source, false)"),
                    {"id": user_id, "now": utcnow(), "source": source})
        await migrate.upgrade(engine)
        async with engine.connect() as conn:
            got = dict((await conn.execute(
                sa.text("SELECT id, standing_until FROM users ORDER BY id")
                .columns(id=sa.String, standing_until=UTCDateTime))).tuples().all())
        assert got["u1"] is None and got["u2"] is not None
        assert abs(got["u2"] - (utcnow() + timedelta(days=30))) < timedelta(minutes=5)
        await migrate.downgrade(engine, "0040")
    finally:
        await engine.dispose()
