"""Agent-facing endpoints: register with a join token, then authenticate as the node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, WebSocket, status

from gpuslice.common.schemas.agents import (
    Answer,
    Assignments,
    Heartbeat,
    HeartbeatAck,
    NodeRegister,
    NodeRegistered,
    StateReport,
)
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.api.deps import (
    Bearer,
    CurrentNodeId,
    DbDep,
    HeartbeatCredential,
    HubDep,
    SessionmakerDep,
    SettingsDep,
)
from gpuslice.manager.api.edge import node_body
from gpuslice.manager.api.errors import deny
from gpuslice.manager.api.parking import Parked
from gpuslice.manager.errors import DomainError
from gpuslice.manager.services import channel
from gpuslice.manager.services.apps.links import LinkPool
from gpuslice.manager.services.nodes import assignments, heartbeats, registration, reports
from gpuslice.manager.services.nodes.instances import LIVE_HEARTBEATS

router = APIRouter(prefix="/agents", tags=["agents"])


@router.post("/register", status_code=status.HTTP_201_CREATED)
async def register(
    body: NodeRegister, db: DbDep, settings: SettingsDep, credentials: Bearer
) -> NodeRegistered:
    """Register a node with an admin's single-use join token, and answer its own credential.
    An existing node's name needs that node's current credential (as the bearer token: the
    credential is rotated) or an admin's re-key token for it: 409 `node_exists` otherwise."""
    secret = credentials.credentials if credentials is not None else None
    return await registration.register(db, body, settings.nodes, secret)


@router.post("/me/heartbeat")
@node_body
async def heartbeat(
    request: Request, body: Heartbeat, credential: HeartbeatCredential
) -> HeartbeatAck:
    """Report devices, capacity, images and usage (samples go to monitoring's history); keeps
    the node ALIVE."""
    # The app's parts read here, not as dependencies: this is the call every node makes every
    # few seconds, and each dependency FastAPI solves costs it CPU (see bench/agents.py).
    state = request.app.state
    async with state.sessionmaker() as db:
        return await heartbeats.heartbeat(
            db, credential, body, max_gap_ms=round(state.settings.nodes.node_timeout * 1000),
            timed=state.metrics.heartbeat_store.observe,
            live_s=state.settings.nodes.heartbeat_interval * LIVE_HEARTBEATS,
        )


@router.get("/me/assignments", response_model=Assignments)
async def get_assignments(
    node_id: CurrentNodeId,
    sessionmaker: SessionmakerDep,
    hub: HubDep,
    since: Annotated[int | None, Query(description="The version the agent has.")] = None,
    wait: Annotated[float, Query(ge=0, le=60, description="Long-poll seconds.")] = 25,
) -> Response:
    """The node's desired state; with `since`, waits until it differs from that version."""
    async def answer(gone: Callable[[], Awaitable[bool]]) -> Response:
        found = await assignments.long_poll(sessionmaker, hub, node_id, since, wait, gone=gone)
        return Response(found.model_dump_json(), media_type="application/json")

    # The wait happens outside FastAPI's stack, which holds far more than the wait needs.
    return Parked(answer)


@router.post("/me/sessions/{session_id}/state")
@node_body
async def report_state(
    session_id: str, body: StateReport, db: DbDep, node_id: CurrentNodeId
) -> dict[str, SessionStatus]:
    """Report a session's actual state (PREPARING, RUNNING, TERMINATED with code, ERROR)."""
    return {"status": await reports.report_state(db, node_id, session_id, body)}


@router.put("/me/requests/{request_id}", status_code=status.HTTP_204_NO_CONTENT)
@node_body
async def answer_request(
    request_id: str, body: Answer, db: DbDep, node_id: CurrentNodeId
) -> None:
    """Answer a request that came with the assignments, with an answer of its `kind`. Only the
    node it was sent to may, once, while it is awaited: 404 otherwise (422 for another kind)."""
    await channel.answer(db, node_id, request_id, body)


@router.websocket("/me/streams/{request_id}")
async def stream_link(websocket: WebSocket, request_id: str) -> None:
    """The link for a `stream` request, dialled back by the node it was sent to (once, before
    it expires; 404 otherwise); it carries the streams `common.schemas.streams` describes."""
    pool: LinkPool = websocket.app.state.links
    try:
        async with websocket.app.state.sessionmaker() as db:
            node = await registration.authenticate_node(db, _bearer(websocket))
        session_id = await pool.claim(node.id, request_id)
    except DomainError as err:
        await deny(websocket, err)
        return
    await websocket.accept()
    await pool.attach(request_id, websocket, node.id, session_id)


def _bearer(websocket: WebSocket) -> str:
    kind, _, secret = websocket.headers.get("authorization", "").partition(" ")
    return secret.strip() if kind.lower() == "bearer" else ""
