"""The call a run's session makes through its node's agent (the in-session endpoint): its
script succeeded and saving its output starts. Authenticated as the node; ``NodeSession``
admits only a session placed on that node."""

from __future__ import annotations

from fastapi import APIRouter

from gpuslice.common.schemas.runs import RunSaving, RunSavingAck
from gpuslice.manager.api.deps import DbDep, NodeSession
from gpuslice.manager.services.runs import runs

router = APIRouter(prefix="/agents/me/sessions/{session_id}", tags=["in-session"])


@router.post("/run/saving")
async def run_saving(body: RunSaving, session: NodeSession, db: DbDep) -> RunSavingAck:
    """The run's script succeeded after `script_s` seconds (its duration from now on, even
    when the manager was down as it ended); its reason says its output is being saved. 404
    for a session that is not a run."""
    return await runs.saving(db, session, body)
