"""Agent-facing endpoints: register with a join token, then authenticate as the node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from gpuslice.common.schemas.agents import (
    Assignments,
    CommitUpload,
    ExecUpload,
    Heartbeat,
    HeartbeatAck,
    LogUpload,
    NodeRegister,
    NodeRegistered,
    StateReport,
)
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.api.deps import CurrentNode, DbDep, HubDep, SessionmakerDep, SettingsDep
from gpuslice.manager.services import agents, assignments, logs, session_commit, session_exec

router = APIRouter(prefix="/agents", tags=["agents"])


@router.post("/register", status_code=status.HTTP_201_CREATED)
async def register(body: NodeRegister, db: DbDep, settings: SettingsDep) -> NodeRegistered:
    """Register a node with an admin's join token; answers the node's own credential."""
    return await agents.register(db, body, settings.nodes)


@router.post("/me/heartbeat")
async def heartbeat(body: Heartbeat, db: DbDep, node: CurrentNode) -> HeartbeatAck:
    """Report devices, capacity, images and usage; keeps the node ALIVE."""
    return await agents.heartbeat(db, node, body)


@router.get("/me/assignments")
async def get_assignments(
    node: CurrentNode,
    sessionmaker: SessionmakerDep,
    hub: HubDep,
    settings: SettingsDep,
    since: Annotated[int | None, Query(description="The version the agent has.")] = None,
    wait: Annotated[float, Query(ge=0, le=60, description="Long-poll seconds.")] = 25,
) -> Assignments:
    """The node's desired state; with `since`, waits until it differs from that version."""
    return await assignments.long_poll(
        sessionmaker, hub, node.id, since, wait, settings.nodes.assignment_poll
    )


@router.post("/me/sessions/{session_id}/state")
async def report_state(
    session_id: str, body: StateReport, db: DbDep, node: CurrentNode
) -> dict[str, SessionStatus]:
    """Report a session's actual state (PREPARING, RUNNING, TERMINATED with code, ERROR)."""
    return {"status": await agents.report_state(db, node, session_id, body)}


@router.put("/me/logs/{request_id}", status_code=status.HTTP_204_NO_CONTENT)
async def upload_logs(request_id: str, body: LogUpload, db: DbDep, node: CurrentNode) -> None:
    """Answer a log request that came with the assignments."""
    await logs.upload_logs(db, node.id, request_id, body)


@router.put("/me/exec/{request_id}", status_code=status.HTTP_204_NO_CONTENT)
async def upload_exec(request_id: str, body: ExecUpload, db: DbDep, node: CurrentNode) -> None:
    """Answer an exec request that came with the assignments (only its node may; 404 else)."""
    await session_exec.upload_result(db, node.id, request_id, body)


@router.put("/me/commits/{request_id}", status_code=status.HTTP_204_NO_CONTENT)
async def upload_commit(
    request_id: str, body: CommitUpload, db: DbDep, node: CurrentNode
) -> None:
    """Answer a commit request that came with the assignments (only its node may; 404 else)."""
    await session_commit.upload_result(db, node.id, request_id, body)
