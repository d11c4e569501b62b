"""Asking the agent of a session's node: the channel, with the session's words for failures."""

from __future__ import annotations

from gpuslice.common.schemas.agents import Ask
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import AgentTimeout, Conflict
from gpuslice.manager.services.channel import A, Channel


async def ask(
    channel: Channel, row: SessionRow, question: Ask, expect: type[A], *, timeout: float,
    late: str,
) -> A:
    """The answer of the agent of ``row``'s node; ``AgentTimeout`` ("the agent of session N did
    not ``late``") when none came within ``timeout`` seconds, ``Conflict`` when the session has
    no node."""
    if row.node_id is None:
        raise Conflict(f"session {row.name} is not on a node", code="not_running")
    done = await channel.ask(
        row.node_id, question, expect, timeout=timeout, session_id=row.id,
        about=f"session {row.name}",
    )
    if done is None:
        raise AgentTimeout(f"the agent of session {row.name} did not {late}")
    return done
