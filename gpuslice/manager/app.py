"""The manager application: ``create_app(settings)`` wires it all; nothing happens at import."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from fastapi import APIRouter, FastAPI
from starlette.types import Scope

from gpuslice.manager.api import edge, errors
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
from gpuslice.manager.db import migrate
from gpuslice.manager.db.engine import make_engine, make_sessionmaker
from gpuslice.manager.events import Hub
from gpuslice.manager.loops import supervise
from gpuslice.manager.services import channel, retention
from gpuslice.manager.services.login_throttle import LoginThrottle, too_many
from gpuslice.manager.services.nodes import registration
from gpuslice.manager.services.nodes.liveness import sweep_lost
from gpuslice.manager.services.scheduling.passes import run_pass
from gpuslice.manager.services.users import ensure_admin
from gpuslice.manager.settings import ManagerSettings

log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"
LOGIN_PATH = f"{API_PREFIX}/auth/login"
# Every API router, in the order they are matched (the edge learns their routes from here).
ROUTES = (health, auth, users, policies, sessions, images, nodes, agents)
# Requests are purged this long after their expiry (their waiter died with its manager).
_REQUEST_GRACE = timedelta(minutes=1)
# Seconds between retention passes (each purges a bounded batch).
RETENTION_INTERVAL = 300.0


def create_app(settings: ManagerSettings) -> FastAPI:
    """The FastAPI app; its lifespan opens the database, migrates, and runs the loops."""
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
    errors.install(app)
    routers = [module.router for module in ROUTES]
    app.add_middleware(
        edge.Edge, limits=settings.limits, routers=[(API_PREFIX, r) for r in routers],
        node_credential=_is_node, gate=_login_gate,
    )
    api = APIRouter(prefix=API_PREFIX)
    for router in routers:
        api.include_router(router)
    app.include_router(api)
    return app


def _login_gate(scope: Scope) -> edge.Refused | None:
    """A login from an address this manager found flooding is refused before it is read."""
    throttle = getattr(scope["app"].state, "login_throttle", None)
    client = scope.get("client")
    if throttle is None or client is None or scope["path"] != LOGIN_PATH:
        return None
    left = throttle.gate(client[0])
    if left is None:
        return None
    message, wait = too_many(True, left)
    return edge.Refused(429, "too_many_requests", message,
                        headers={"Retry-After": str(wait)})


async def _is_node(scope: Scope, secret: str) -> bool:
    """Whether ``secret`` is a node's credential (the edge lets nodes send larger bodies)."""
    async with scope["app"].state.sessionmaker() as db:
        return await registration.is_node_credential(db, secret)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: ManagerSettings = app.state.settings
    # Private: the SQLite database and the admin credentials live here.
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings.data_dir.chmod(0o700)
    hub = Hub()
    engine = make_engine(
        settings.database_url, pool_size=settings.database.pool_size, echo=settings.database.echo
    )
    sessionmaker = make_sessionmaker(engine, hub)
    app.state.hub, app.state.engine, app.state.sessionmaker = hub, engine, sessionmaker
    app.state.channel = channel.Channel(sessionmaker, hub, settings.nodes.assignment_poll)
    app.state.login_throttle = LoginThrottle.of(settings.auth)
    try:
        if settings.database.migrate_on_start:
            await migrate.upgrade(engine)
        await ensure_admin(sessionmaker, settings.auth.admin_username, settings.data_dir)
        loops = _start_loops(app)
        try:
            yield
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
    finally:
        app.state.login_throttle.checks.close()
        await engine.dispose()


def _start_loops(app: FastAPI) -> list[asyncio.Task[None]]:
    settings: ManagerSettings = app.state.settings
    hub: Hub = app.state.hub
    sessionmaker = app.state.sessionmaker
    config = settings.scheduler.core_config()

    async def schedule() -> None:
        await run_pass(sessionmaker, config, hub)

    started = time.monotonic()

    async def sweep() -> None:
        # Just after a (re)start every node's last heartbeat is as old as the manager's own
        # downtime: agents get one node_timeout to report before any is called lost.
        if time.monotonic() - started >= settings.nodes.node_timeout:
            await sweep_lost(sessionmaker, settings.nodes.node_timeout)
        async with sessionmaker() as db:
            await channel.purge(db, _REQUEST_GRACE)

    async def forget() -> None:
        await retention.purge(
            sessionmaker, settings.sessions.retention_days, settings.auth.login_window
        )

    scheduler = supervise(
        "scheduler", schedule, interval=settings.scheduler.interval, wake=hub.scheduler
    )
    sweeper = supervise("node sweep", sweep, interval=settings.nodes.sweep_interval)
    purger = supervise("retention", forget, interval=RETENTION_INTERVAL)
    return [
        asyncio.create_task(scheduler, name="gpuslice-scheduler"),
        asyncio.create_task(sweeper, name="gpuslice-node-sweep"),
        asyncio.create_task(purger, name="gpuslice-retention"),
    ]
