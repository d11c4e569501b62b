"""Commands run in a RUNNING session, through its node's agent.

An exec request is a row that rides to the agent on its assignments (``agent_requests``), like a
log request; the agent runs the command in the session's container and answers with
``PUT /api/v1/agents/me/exec/{request_id}``; the waiting user request returns the result.

The request is delivered while open and unexpired, so an agent sees it in every assignments
answer until it answers: agents run each request id once. It is never delivered after
``expires_at`` (the user has stopped waiting; a command nobody awaits must not run). A command's
argv and output are the user's: they are stored only until the answer is picked up, and never
logged.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gpuslice.common.schemas.agents import ExecRequest, ExecUpload
from gpuslice.common.schemas.sessions import SessionExec, SessionExecResult, SessionStatus
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import ExecRequestRow, SessionRow
from gpuslice.manager.errors import AgentTimeout, Conflict
from gpuslice.manager.events import Hub
from gpuslice.manager.services import agent_requests


async def run_command(
    sessionmaker: async_sessionmaker[AsyncSession],
    hub: Hub,
    row: SessionRow,
    body: SessionExec,
    grace: float,
    poll: float,
) -> SessionExecResult:
    """Run ``body.command`` in the session and wait up to ``body.timeout + grace`` seconds.

    Raises ``Conflict`` ``not_running`` (not RUNNING), ``node_lost``, or ``exec_failed`` (the
    agent could not run it: its message), and ``AgentTimeout`` when no answer came in time.
    """
    if row.status != SessionStatus.RUNNING or row.node_id is None:
        raise Conflict(
            f"session {row.name} is {row.status}: commands run only in a RUNNING session",
            code="not_running",
        )
    wait = body.timeout + grace
    async with sessionmaker() as db:
        request = ExecRequestRow(
            session_id=row.id, node_id=row.node_id, command=body.command, timeout=body.timeout,
            expires_at=utcnow() + timedelta(seconds=wait),
        )
        request_id = await agent_requests.send(db, row, request)
    done = await agent_requests.await_answer(
        sessionmaker, hub.execs, ExecRequestRow, request_id, wait, poll
    )
    if done is None:
        raise AgentTimeout(
            f"the agent of session {row.name} did not answer the command within {wait:g} s"
        )
    if done.error:
        raise Conflict(done.error, code="exec_failed")
    return SessionExecResult(
        session_id=row.id, exit_code=done.exit_code if done.exit_code is not None else -1,
        stdout=done.stdout or "", stderr=done.stderr or "",
    )


async def upload_result(
    db: AsyncSession, node_id: str, request_id: str, body: ExecUpload
) -> None:
    """The agent's answer to an exec request addressed to ``node_id``."""
    await agent_requests.answer(
        db, ExecRequestRow, node_id, request_id, "exec", exit_code=body.exit_code,
        stdout=body.stdout, stderr=body.stderr, error=body.error,
    )


async def pending_for(db: AsyncSession, node_id: str) -> list[ExecRequest]:
    """Open exec requests for the node whose user still waits, oldest first."""
    return [
        ExecRequest(id=r.id, session_id=r.session_id, command=r.command, timeout=r.timeout)
        for r in await agent_requests.open_for(db, ExecRequestRow, node_id)
    ]


async def purge_stale(db: AsyncSession, grace: timedelta) -> None:
    """Drop exec requests expired more than ``grace`` ago (their waiter died with its manager)."""
    await agent_requests.purge_expired(db, ExecRequestRow, grace)
