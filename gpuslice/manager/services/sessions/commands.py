"""Commands run in a RUNNING session, through its node's agent (an ``exec`` request).

The agent runs the command in the session's container as the session's user and answers its
exit code and output. The request is delivered once and never after the user stopped waiting
(a command nobody awaits must not run). A command's argv and output are the user's: they are
stored only until the answer is picked up, and never logged.
"""

from __future__ import annotations

from gpuslice.common.schemas.agents import ExecAnswer, ExecAsk
from gpuslice.common.schemas.sessions import SessionExec, SessionExecResult, SessionStatus
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import Conflict
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.sessions import agent


async def run_command(
    channel: Channel, row: SessionRow, body: SessionExec, grace: float
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
    ask = ExecAsk(command=body.command, timeout_ms=max(1, round(body.timeout * 1000)))
    done = await agent.ask(
        channel, row, ask, ExecAnswer, timeout=wait, late=f"answer the command within {wait:g} s"
    )
    if done.error:
        raise Conflict(done.error, code="exec_failed")
    return SessionExecResult(
        session_id=row.id, exit_code=done.exit_code, stdout=done.stdout, stderr=done.stderr
    )
