"""Audit retention (issue 43): rows past `audit.retention_days` are archived to a JSON lines
file, then purged under the triggers' guard; the chain still checks out from the purge's
checkpoint, and nothing else may delete a row."""

from __future__ import annotations

import json
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.services.audit import retention
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows, seal
from tests.manager.conftest import Client

pytestmark = pytest.mark.loops_off("audit_seal", "retention")


async def test_old_rows_are_archived_then_purged_and_the_chain_still_holds(
    app: FastAPI, admin: Client, settings: ManagerSettings, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        r = await admin.post("/api/v1/presets", json={"name": name, "cpu": 1, "mem": "1g"})
        assert r.status_code == 201, r.text
    await seal(app)
    old = await rows(app)
    archive = tmp_path / "archive"
    assert await retention.purge(app.state.sessionmaker, 400, archive) == 0  # none that old
    later = utcnow() + timedelta(days=401)
    purged = await retention.purge(app.state.sessionmaker, 400, archive, now=later)
    assert purged == len(old)
    [file] = archive.iterdir()
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert [(x["id"], x["seal_pos"], x["hash"]) for x in lines] == [
        (r.id, r.seal_pos, r.hash) for r in old]
    [checkpoint] = await rows(app)
    assert checkpoint.action == "audit.purge" and checkpoint.actor_id == "system:retention"
    assert checkpoint.seq > old[-1].seq  # numbers are never reused
    assert json.loads(checkpoint.details or "{}")["through_pos"] == old[-1].seal_pos
    verdict = (await admin.get("/api/v1/audit/verify")).json()
    assert verdict["intact"] is True, verdict
    async with app.state.sessionmaker() as db:  # outside a purge, still no DELETE
        with pytest.raises(DBAPIError, match="only by the retention purge"):
            await db.execute(text("DELETE FROM audit_log"))


async def test_zero_days_keeps_every_row(app: FastAPI, admin: Client, tmp_path: Path) -> None:
    await seal(app)
    later = utcnow() + timedelta(days=10_000)
    assert await retention.purge(app.state.sessionmaker, 0, tmp_path, now=later) == 0
    assert await rows(app)
