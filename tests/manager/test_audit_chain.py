"""The audit log's tamper evidence (issue 43): append-only in the database (triggers, on
SQLite and PostgreSQL), and a keyed hash chain whose check names the first row that was
changed, deleted or inserted."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from gpuslice.manager.db.audit_models import AuditRow
from gpuslice.manager.services.audit import chain
from tests.manager.audit_helpers import rows, seal
from tests.manager.conftest import Client

pytestmark = pytest.mark.loops_off("audit_seal")  # the test seals when it chooses


async def _some_rows(admin: Client, n: int = 4) -> None:
    for i in range(n):
        r = await admin.post("/api/v1/presets", json={"name": f"p{i}", "cpu": 1, "mem": "1g"})
        assert r.status_code == 201, r.text


async def _sql(app: FastAPI, *statements: str) -> None:
    async with app.state.sessionmaker() as db:
        for statement in statements:
            await db.execute(text(statement))
        await db.commit()


async def _untriggered(app: FastAPI, statement: str) -> None:
    """``statement`` as someone with the database's own rights does it: triggers off."""
    if app.state.engine.dialect.name == "postgresql":
        await _sql(app, "ALTER TABLE audit_log DISABLE TRIGGER USER", statement,
                   "ALTER TABLE audit_log ENABLE TRIGGER USER")
    else:
        await _sql(app, "DROP TRIGGER IF EXISTS audit_log_no_update",
                   "DROP TRIGGER IF EXISTS audit_log_no_delete",
                   statement)


async def _verdict(admin: Client) -> dict[str, object]:
    r = await admin.get("/api/v1/audit/verify")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_rows_can_neither_be_changed_nor_deleted(app: FastAPI, admin: Client) -> None:
    await _some_rows(admin, 1)
    await seal(app)
    for statement in ("UPDATE audit_log SET outcome = 'failure'",
                      "UPDATE audit_log SET hash = 'x'",  # a sealed row's seal too
                      "DELETE FROM audit_log"):
        with pytest.raises(DBAPIError, match="audit_log rows"):
            await _sql(app, statement)


async def test_rows_are_sealed_in_order_and_the_chain_holds(app: FastAPI, admin: Client) -> None:
    await _some_rows(admin)
    assert all(row.seal_pos is None for row in await rows(app))
    await seal(app)
    sealed = await rows(app)
    assert [row.seal_pos for row in sealed] == list(range(1, len(sealed) + 1))
    assert sealed[0].prev_hash == chain.GENESIS
    assert all(b.prev_hash == a.hash for a, b in zip(sealed, sealed[1:], strict=False))
    verdict = await _verdict(admin)
    assert verdict["intact"] is True and verdict["head_pos"] == len(sealed)
    [check] = await rows(app, action="audit.verify")  # the check is itself audited
    assert check.outcome == "success" and check.actor_name == "admin"


@pytest.mark.parametrize("tamper, says", [
    ("UPDATE audit_log SET outcome = 'denied' WHERE seal_pos = 3", "does not match its hash"),
    ("DELETE FROM audit_log WHERE seal_pos = 3", "position 3 is missing"),
    ("DELETE FROM audit_log WHERE seal_pos >= 3", "rows after it were deleted"),
    ("UPDATE audit_log SET seal_pos = seal_pos + 100 WHERE seal_pos >= 3",
     "position 3 is missing"),
])
async def test_the_check_finds_a_changed_or_deleted_row(
    app: FastAPI, admin: Client, tamper: str, says: str
) -> None:
    await _some_rows(admin)
    await seal(app)
    await _untriggered(app, tamper)
    verdict = await _verdict(admin)
    assert verdict["intact"] is False and verdict["first_break"] == 3, verdict
    assert says in str(verdict["problem"])


async def test_the_check_finds_an_inserted_row(app: FastAPI, admin: Client) -> None:
    await _some_rows(admin)
    await seal(app)
    first = (await rows(app))[0]
    # A forged row squeezed in at position 2, the rows after it moved up one.
    await _untriggered(app, "UPDATE audit_log SET seal_pos = seal_pos + 1000 WHERE seal_pos >= 2")
    await _untriggered(app, "UPDATE audit_log SET seal_pos = seal_pos - 999 "
                            "WHERE seal_pos >= 1002")
    async with app.state.sessionmaker() as db:
        db.add(AuditRow(id="forged", at=first.at, actor_type="user", action="auth.login",
                        outcome="success", seal_pos=2, prev_hash=first.hash, hash="0" * 64,
                        key_id=app.state.audit_key.id))
        await db.commit()
    verdict = await _verdict(admin)
    assert verdict["intact"] is False and verdict["first_break"] == 2, verdict
    assert "inserted" in str(verdict["problem"])


async def test_sealers_side_by_side_give_each_row_one_position(
    app: FastAPI, admin: Client
) -> None:
    """Two managers seal at once (PostgreSQL: an advisory lock takes turns; SQLite: one
    writer): every row gets one position, the chain has no gap and no fork."""
    await _some_rows(admin, 8)

    async def sealer() -> None:
        async with app.state.sessionmaker() as db:
            await chain.seal(db, app.state.audit_key, batch=3)

    for _ in range(4):
        await asyncio.gather(sealer(), sealer(), sealer())
    await seal(app)
    sealed = await rows(app)
    assert [row.seal_pos for row in sealed] == list(range(1, len(sealed) + 1))
    assert (await _verdict(admin))["intact"] is True
