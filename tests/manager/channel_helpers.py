"""A request through the manager's channel to a node, as the channel's tests and the
long-poll's ask it: a node that sees requests but answers none, with a session on it, and a
question (``true`` run in the session) asked of it."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from sqlalchemy import func, select

from gpuslice.common.schemas.agents import ExecAnswer, ExecAsk
from gpuslice.manager.db.models import AgentRequestRow
from gpuslice.manager.services.channel import Channel
from tests.manager.conftest import AgentFactory, Client, create
from tests.manager.fake_agent import FakeAgent
from tests.manager.helpers import wait_status
from tests.waits import await_for


async def node_with_session(admin: Client, make_agent: AgentFactory) -> tuple[FakeAgent, str]:
    agent = await make_agent(auto_run=False)  # it sees requests but answers none
    [s] = await create(admin, resources={"gpu": 0.5})
    await wait_status(admin, s["id"], {"SCHEDULED"})
    await agent.report(s["id"], "RUNNING")
    return agent, s["id"]


def ask(app: FastAPI, node_id: str, session_id: str, timeout: float) -> asyncio.Task[Any]:
    channel: Channel = app.state.channel
    question = ExecAsk(command=["true"], timeout_ms=1000)
    return asyncio.create_task(
        channel.ask(node_id, question, ExecAnswer, timeout=timeout, session_id=session_id)
    )


async def asked(app: FastAPI, node_id: str, session_id: str,
                timeout: float) -> asyncio.Task[Any]:
    """:func:`ask`, once its request is stored: the node's next answer carries it."""
    waiting = ask(app, node_id, session_id, timeout)

    async def stored() -> bool:
        async with app.state.sessionmaker() as db:
            count = select(func.count()).where(AgentRequestRow.node_id == node_id)
            return bool(await db.scalar(count))

    await await_for(stored, 10, "the request stored")
    return waiting
