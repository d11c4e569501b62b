"""Liveness and readiness, as a load balancer or a service manager reads them; every
background loop's health (`/health/loops`, `/metrics`), a loop left off, one pass by hand."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from gpuslice.manager import loop_table
from gpuslice.manager.app import create_app
from gpuslice.manager.db import migrate
from gpuslice.manager.loop_table import run_once
from gpuslice.manager.loops import Loop, supervise
from gpuslice.manager.services.scheduling.passes import PassStats
from gpuslice.manager.settings import LdapSettings, ManagerSettings, OidcSettings
from tests.manager.conftest import Client, client_for, create
from tests.waits import await_for


async def test_a_started_manager_is_live_and_ready(anon: Client) -> None:
    assert (await anon.get("/api/v1/health/live")).json() == {"status": "ok"}
    r = await anon.get("/api/v1/health/ready")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "migrations", "scheduler", "node_sweep"}
    assert body["checks"]["migrations"]["detail"] == f"revision {migrate.head()} (head)"


async def test_not_ready_when_the_schema_is_not_this_codes_head(
    app: FastAPI, anon: Client
) -> None:
    head = migrate.head()
    async with app.state.sessionmaker() as db:
        await db.execute(text("UPDATE alembic_version SET version_num = 'zzzz_newer'"))
        await db.commit()
    try:
        r = await anon.get("/api/v1/health/ready")
        assert r.status_code == 503
        check = r.json()["checks"]["migrations"]
        assert check == {"ok": False, "detail": "database at revision zzzz_newer; "
                                                f"this manager's head is {head}"}
        # liveness does not depend on it: a service manager must not restart the process
        assert (await anon.get("/api/v1/health/live")).status_code == 200
    finally:
        async with app.state.sessionmaker() as db:
            await db.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
            await db.commit()


async def test_not_ready_when_the_scheduler_loop_died(app: FastAPI, anon: Client) -> None:
    [task] = [t for t in asyncio.all_tasks() if t.get_name() == "gpuslice-scheduler"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    app.state.loops["scheduler"].state.beat = time.monotonic() - 3600  # died an hour ago
    r = await anon.get("/api/v1/health/ready")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready"
    assert body["checks"]["scheduler"]["ok"] is False
    # the hour, plus however long the request took on a busy machine (a second, rounded up)
    said = re.search(r"scheduler has not run for (\d+) s", body["checks"]["scheduler"]["detail"])
    assert said is not None and 3600 <= int(said[1]) <= 3610
    assert body["checks"]["database"]["ok"] is True


async def test_every_loop_of_the_table_reports_its_health_after_its_first_pass(
    settings: ManagerSettings,
) -> None:
    settings.apps.port_range = "29000-29009"  # so that the app ports loop exists too
    settings.monitoring.public_metrics = True
    # the sign-in re-checks exist with a provider (nobody signed in: a pass asks it nothing)
    settings.auth.public_url = "http://127.0.0.1:1"
    settings.auth.oidc = OidcSettings(issuer="http://127.0.0.1:1", client_id="gpuslice",
                                      allow_all=True)
    settings.auth.ldap = LdapSettings(url="ldap://127.0.0.1:1", allow_all=True)
    app = create_app(settings)
    async with app.router.lifespan_context(app), client_for(app) as anon:

        async def all_went_round() -> dict[str, Any] | None:
            loops = (await anon.get("/api/v1/health/loops")).json()["loops"]
            return loops if all(loop["passes"] for loop in loops.values()) else None

        loops = await await_for(all_went_round, 30, "a first pass of every loop")
        metrics = _scraped((await anon.get("/metrics")).text)
    assert set(loops) == loop_table.KEYS
    for key, loop in loops.items():
        assert loop["ok"] and loop["running"], (key, loop)
        assert loop["failures"] == 0 and loop["last_error"] is None, (key, loop)
        assert loop["last_pass_at"] is not None and loop["detail"].startswith("ran "), loop
        assert loop["readiness"] == (key in {"scheduler", "node_sweep"}), key
        assert metrics["gpuslice_loop_healthy"][key] == 1, key
        assert metrics["gpuslice_loop_passes_total"][key] >= 1, key
        assert metrics["gpuslice_loop_consecutive_failures"][key] == 0, key
    assert loops["scheduler"]["interval"] == settings.scheduler.interval


@pytest.mark.loops_off("scheduler")
async def test_a_failing_loop_is_reported_with_its_error_then_recovers(
    app: FastAPI, admin: Client, anon: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three failed passes in a row: the loop is failing (the error's type, never its text,
    in the public answers) and readiness, which waits on the scheduler, is 503."""
    broken = True

    async def flaky(*args: object) -> PassStats:
        if broken:
            raise RuntimeError("database is locked at /secret/path")
        return PassStats()

    monkeypatch.setattr(loop_table, "run_pass", flaky)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await run_once(app, "scheduler")
    failing = (await anon.get("/api/v1/health/loops")).json()
    assert failing["status"] == "failing"
    scheduler = failing["loops"]["scheduler"]
    assert (scheduler["ok"], scheduler["failures"], scheduler["last_error"]) == (
        False, 3, "RuntimeError")
    assert scheduler["detail"] == ("scheduler failed 3 times in a row (RuntimeError; the "
                                   "manager's log says why)")
    ready = await anon.get("/api/v1/health/ready")
    assert ready.status_code == 503 and ready.json()["checks"]["scheduler"]["ok"] is False
    assert "/secret/path" not in ready.text + str(failing)
    metrics = _scraped((await admin.get("/metrics")).text)
    assert metrics["gpuslice_loop_healthy"]["scheduler"] == 0
    assert metrics["gpuslice_loop_consecutive_failures"]["scheduler"] == 3

    broken = False
    await run_once(app, "scheduler")
    recovered = (await anon.get("/api/v1/health/loops")).json()["loops"]["scheduler"]
    assert (recovered["ok"], recovered["failures"], recovered["passes"]) == (True, 0, 1)
    assert recovered["last_error"] == "RuntimeError"  # kept: what went wrong last time
    assert (await anon.get("/api/v1/health/ready")).status_code == 200


async def test_a_supervised_loop_logs_a_failed_pass_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcomes = [RuntimeError("database is locked"), RuntimeError("again"), None]

    async def body() -> None:
        if outcomes and (error := outcomes.pop(0)) is not None:
            raise error

    loop = Loop("node sweep", body, interval=0.01)
    task = asyncio.create_task(supervise(loop))
    try:
        async def recovered() -> bool:
            return loop.state.passes >= 1

        await await_for(recovered, 10, "a pass after two failures")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert failed[:2] == ["node sweep failed (1 in a row); retrying",
                          "node sweep failed (2 in a row); retrying"]
    assert (loop.state.failures, loop.state.last_error) == (0, "RuntimeError")
    assert loop.state.problem() is None


@pytest.mark.loops_off("scheduler")
async def test_a_loop_left_off_does_not_run_and_run_once_runs_one_pass(
    app: FastAPI, admin: Client, anon: Client
) -> None:
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "gpuslice-scheduler"]
    [s] = await create(admin)
    off = (await anon.get("/api/v1/health/loops")).json()["loops"]["scheduler"]
    assert (off["running"], off["passes"], off["ok"]) == (False, 0, True)
    assert off["detail"] == "left off (0 passes run when asked)"
    waiting = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert waiting["wait_code"] is None  # no pass has looked at it

    await run_once(app, "scheduler")
    looked = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
    assert looked["status"] == "PENDING" and looked["wait_code"] == "no_node", looked
    assert (await anon.get("/api/v1/health/loops")).json()["loops"]["scheduler"]["passes"] == 1


def test_only_a_loop_of_the_table_can_be_left_off(settings: ManagerSettings) -> None:
    with pytest.raises(ValueError, match="no loop named schedular; the loops: app_ports, "):
        create_app(settings, loops_off=["schedular"])


def _scraped(body: str) -> dict[str, dict[str, float]]:
    """Each ``gpuslice_loop_*`` sample's value by its loop."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("gpuslice_loop_"):
                found.setdefault(sample.name, {})[sample.labels["loop"]] = sample.value
    return found
