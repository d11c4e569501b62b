"""The manager application: ``create_app(settings)`` wires it all; nothing happens at import."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from fastapi import APIRouter, FastAPI

from gpuslice.manager.api import errors
from gpuslice.manager.api.routes import (
    agents,
    auth,
    health,
    images,
    nodes,
    policies,
    sessions,
    users,
)
from gpuslice.manager.api.version_headers import VersionHeaders
from gpuslice.manager.events import Hub
from gpuslice.manager.loops import supervise
from gpuslice.manager.services import channel
from gpuslice.manager.services.nodes.liveness import SweepGrace, sweep_lost
from gpuslice.manager.services.scheduling.passes import run_pass
from gpuslice.manager.settings import ManagerSettings
from gpuslice.manager.startup import Database, open_database

log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"
# Requests are purged this long after their expiry (their waiter died with its manager).
_REQUEST_GRACE = timedelta(minutes=1)


def create_app(settings: ManagerSettings, database: Database | None = None) -> FastAPI:
    """The FastAPI app; its lifespan runs the loops on ``database``, which it opens (and
    migrates) itself when none is given, and closes in any case."""
    app = FastAPI(
        title="gpuslice manager",
        version="0.1.0",
        summary="Fractional-GPU compute sessions: users, quotas, sessions, nodes, scheduling.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        lifespan=_lifespan,
        responses=errors.ERROR_RESPONSES,
    )
    app.state.settings = settings
    app.state.database = database
    app.add_middleware(VersionHeaders)
    errors.install(app)
    api = APIRouter(prefix=API_PREFIX)
    for module in (health, auth, users, policies, sessions, images, nodes, agents):
        api.include_router(module.router)
    app.include_router(api)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: ManagerSettings = app.state.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database: Database = app.state.database or await open_database(settings)
    hub, engine, sessionmaker = database.hub, database.engine, database.sessionmaker
    app.state.hub, app.state.engine, app.state.sessionmaker = hub, engine, sessionmaker
    app.state.channel = channel.Channel(sessionmaker, hub, settings.nodes.assignment_poll)
    try:
        loops = _start_loops(app)
        try:
            yield
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
    finally:
        await engine.dispose()


def _start_loops(app: FastAPI) -> list[asyncio.Task[None]]:
    settings: ManagerSettings = app.state.settings
    hub: Hub = app.state.hub
    sessionmaker = app.state.sessionmaker
    config = settings.scheduler.core_config()

    async def schedule() -> None:
        await run_pass(sessionmaker, config, hub)

    grace = SweepGrace(settings.nodes.node_timeout)

    async def sweep() -> None:
        # After a (re)start, or a jump of the wall clock, heartbeat times say nothing about
        # the nodes: agents get one node_timeout to report before any is called lost.
        if grace.allows_sweep():
            await sweep_lost(sessionmaker, settings.nodes.node_timeout)
        async with sessionmaker() as db:
            await channel.purge(db, _REQUEST_GRACE)

    url = settings.database_url
    scheduler = supervise(
        "scheduler", schedule, interval=settings.scheduler.interval, wake=hub.scheduler,
        database_url=url,
    )
    sweeper = supervise("node sweep", sweep, interval=settings.nodes.sweep_interval,
                        database_url=url)
    return [
        asyncio.create_task(scheduler, name="gpuslice-scheduler"),
        asyncio.create_task(sweeper, name="gpuslice-node-sweep"),
    ]
