"""Backups carry the audit log (issue 43): a restored platform's chain checks out, with the
same head, under the key kept in its data directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI

from gpuslice.manager.app import create_app
from gpuslice.manager.backup import backup, restore
from gpuslice.manager.backup.keys import load_or_create
from gpuslice.manager.settings import ManagerSettings
from tests.manager.audit_helpers import rows, seal
from tests.manager.conftest import Client, client_for, login

pytestmark = pytest.mark.loops_off("audit_seal")  # sealed when the test says, not meanwhile


async def test_a_restored_audit_log_is_whole_and_its_chain_holds(
    app: FastAPI, admin: Client, anon: Client, settings: ManagerSettings, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        r = await admin.post("/api/v1/presets", json={"name": name, "cpu": 1, "mem": "1g"})
        assert r.status_code == 201, r.text
    await seal(app)
    source = (await admin.get("/api/v1/audit/verify")).json()
    assert source["intact"] and source["head_pos"] >= 4
    await seal(app)  # the check's own row, so that the backup holds a fully sealed log
    before = [(row.id, row.seal_pos, row.hash) for row in await rows(app)]
    key = load_or_create(tmp_path / "keys" / "backup-key")[0]
    file = tmp_path / "audit.gsbackup"
    await backup(settings.database_url, file, key)
    target = f"sqlite+aiosqlite:///{tmp_path / 'restored.db'}"
    await restore(file, target, key)

    moved = settings.model_copy(update={"database": settings.database.model_copy(
        update={"url": target})})  # the same data directory: the chain's key is there
    fresh = create_app(moved, loops_off=("audit_seal",))
    async with fresh.router.lifespan_context(fresh), client_for(fresh) as anonymous:
        assert [(row.id, row.seal_pos, row.hash) for row in await rows(fresh)] == before
        token = await login(anonymous, "admin", _password(settings))
        async with client_for(fresh, token) as restored_admin:
            # the check seals what came since (this login): it goes on from the backup's head
            verdict = (await restored_admin.get("/api/v1/audit/verify")).json()
            assert verdict["intact"] is True, verdict
            assert verdict["head_pos"] == len(before) + 1, verdict


def _password(settings: ManagerSettings) -> str:
    lines = (settings.data_dir / "admin-credentials").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)["password"]
