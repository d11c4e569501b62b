"""transition(): the only door for status changes."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from sqlalchemy import String, cast, select, update
from sqlalchemy.exc import StatementError

from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import SessionRow, StatusHistoryRow
from gpuslice.manager.errors import IllegalTransition, StaleStatus
from gpuslice.manager.services.lifecycle import LEGAL, transition
from tests.manager.conftest import Client, create

S = SessionStatus


def test_final_states_have_no_way_out() -> None:
    for final in (S.TERMINATED, S.ERROR, S.CANCELLED):
        assert LEGAL[final] == frozenset()
    # only a preempted session goes back to the queue, once its container is gone (issue 32)
    assert [s for s, to in LEGAL.items() if S.PENDING in to] == [S.TERMINATING]


async def test_illegal_and_stale_moves_are_refused(app: FastAPI, admin: Client) -> None:
    [s] = await create(admin)
    async with app.state.sessionmaker() as db:
        row = await db.get(SessionRow, s["id"])
        assert row is not None
        with pytest.raises(IllegalTransition):
            await transition(db, row, S.RUNNING, "skip the queue")
        await transition(db, row, S.CANCELLED, "test")
        await db.commit()
        db.expunge_all()
        stale = SessionRow(id=s["id"], name="x", owner_id=row.owner_id, status="PENDING",
                           node_id=None, cpu=0, mem=0)
        with pytest.raises(StaleStatus):  # someone else moved it first
            await transition(db, stale, S.ERROR, "late")
        await db.rollback()
        history = (await db.scalars(
            select(StatusHistoryRow.to_status).where(StatusHistoryRow.session_id == s["id"])
        )).all()
        assert history == ["PENDING", "CANCELLED"]


async def test_status_is_typed_at_the_orm_boundary(app: FastAPI, admin: Client) -> None:
    # Read back as members, stored as the plain strings the schema always had; a string that
    # is no status is refused before it reaches the database.
    [s] = await create(admin)
    async with app.state.sessionmaker() as db:
        row = await db.get(SessionRow, s["id"])
        assert row is not None
        assert type(row.status) is S and row.status is S.PENDING
        stored = await db.scalar(select(cast(SessionRow.status, String))
                                 .where(SessionRow.id == s["id"]))
        assert type(stored) is str and stored == "PENDING"
        with pytest.raises(StatementError, match="'QUEUED' is not among"):
            await db.execute(update(SessionRow).where(SessionRow.id == s["id"])
                             .values(status="QUEUED"))
