"""The manager application: ``create_app(settings)`` wires it all; nothing happens at import."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import State
from starlette.types import Scope

from gpuslice.common import heap
from gpuslice.manager import loop_table
from gpuslice.manager.api import edge, errors
from gpuslice.manager.api.parking import Parking
from gpuslice.manager.api.routes import (
    agents,
    apps,
    audit,
    auth,
    config,
    directory,
    folders,
    health,
    identities,
    images,
    model_store,
    models,
    monitoring,
    nodes,
    notify,
    policies,
    presets,
    priorities,
    projects,
    run_calls,
    runs,
    session_calls,
    sessions,
    sign_in,
    ssh,
    users,
)
from gpuslice.manager.api.version_headers import VersionHeaders
from gpuslice.manager.console import routes as console
from gpuslice.manager.db import migrate
from gpuslice.manager.proxy import cli_page, device_page, pages, sso_pages
from gpuslice.manager.proxy import routes as proxy_routes
from gpuslice.manager.proxy.dispatch import ProxyDispatch
from gpuslice.manager.proxy.ports import AppPorts
from gpuslice.manager.services import channel
from gpuslice.manager.services.apps.access import Gate
from gpuslice.manager.services.apps.links import LinkPool
from gpuslice.manager.services.apps.traffic import ActivityMeter
from gpuslice.manager.services.audit import chain as audit_chain
from gpuslice.manager.services.audit.middleware import AuditMiddleware, routed
from gpuslice.manager.services.audit.record import install as install_audit
from gpuslice.manager.services.login_throttle import LoginThrottle, too_many
from gpuslice.manager.services.models import make_store
from gpuslice.manager.services.monitoring.metrics import ManagerMetrics
from gpuslice.manager.services.nodes import registration
from gpuslice.manager.services.storage.fs import StorageFS, may_chown
from gpuslice.manager.settings import ManagerSettings
from gpuslice.manager.startup import Database, open_database

log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"
LOGIN_PATH = f"{API_PREFIX}/auth/login"
# Every API router, in the order they are matched (the edge learns their routes from here).
# Matched in this order, one route after another: the agents' calls first, as with many nodes
# they are most of the requests (matched after eight routers, a heartbeat took ~30% more CPU).
ROUTES = (agents, health, auth, users, policies, presets, priorities, sessions, apps, images,
          nodes, monitoring, folders, models, model_store, session_calls, run_calls, runs, config,
          ssh, projects, notify, audit, identities, directory, sign_in)


def create_app(
    settings: ManagerSettings, database: Database | None = None, *,
    loops_off: Collection[str] = (),
) -> FastAPI:
    """The FastAPI app; its lifespan runs the loops on ``database``, which it opens (and
    migrates) itself when none is given, and closes in any case. The loops named in
    ``loops_off`` (`loop_table` keys) do not run: a test runs their passes itself."""
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
    errors.install(app)
    # The audit context learns the route (its action and target) before any other dependency.
    api = APIRouter(prefix=API_PREFIX, dependencies=[Depends(routed)])
    for module in ROUTES:
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(monitoring.scrape)  # /metrics, where Prometheus looks by default
    app.include_router(proxy_routes.router)  # /login, for browsers
    app.include_router(sso_pages.router)  # /auth/oidc/…: single sign-on
    app.include_router(device_page.router)  # /device: approving a CLI's device sign-in
    app.include_router(cli_page.router)  # /auth/cli: allowing `gpuslice login --sso`
    app.include_router(console.router)  # /, the web console
    app.mount("/assets", StaticFiles(directory=pages.STATIC), name="assets")
    app.mount("/console", StaticFiles(directory=console.STATIC), name="console")
    bind(app, settings, database, loops_off=loops_off)
    return app


def bind(app: FastAPI, settings: ManagerSettings, database: Database | None = None, *,
         loops_off: Collection[str] = ()) -> None:
    """Give an app that ``create_app`` made these settings and database, and fresh state and
    middleware, for its next lifespan (not while one runs). Its routing is kept: FastAPI
    builds every route's dependencies and models anew for each app, ~0.5 s of a core, which
    the manager pays once but a test process that starts an app per test pays each time."""
    app.state = State()
    app.state.settings = settings
    app.state.metrics = ManagerMetrics()
    app.state.database = database
    off = frozenset(loops_off)
    loop_table.check_keys(off)
    app.state.loops_off = off
    app.middleware_stack = None  # built again, with these settings, at the first request
    app.user_middleware.clear()
    app.add_middleware(Parking)  # a long-poll's wait, after FastAPI's stack has unwound
    app.add_middleware(VersionHeaders)
    app.add_middleware(
        edge.Edge, limits=settings.limits,
        routers=[(API_PREFIX, module.router) for module in ROUTES],
        node_credential=_is_node, gate=_login_gate,
    )
    app.add_middleware(ProxyDispatch)  # /s/<session>/<app>/…: the apps, before the router
    # Outermost: every answer gets its request id, and the audit rows their context.
    app.add_middleware(AuditMiddleware)
    install_audit()


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
    database: Database = app.state.database or await open_database(settings)
    hub, engine, sessionmaker = database.hub, database.engine, database.sessionmaker
    app.state.hub, app.state.engine, app.state.sessionmaker = hub, engine, sessionmaker
    app.state.channel = channel.Channel(sessionmaker, hub, settings.nodes.assignment_poll)
    app.state.links = LinkPool(app.state.channel, settings.apps, settings.nodes.advertise_url)
    app.state.gate = Gate(sessionmaker, settings.apps)
    app.state.activity = ActivityMeter(sessionmaker)
    app.state.storage = await _storage(settings)
    app.state.model_store = make_store(settings)
    await app.state.model_store.start()
    app.state.schema_head = migrate.head()
    app.state.login_throttle = LoginThrottle.of(settings.auth)
    app.state.audit_key = audit_chain.load_key(settings.data_dir, create=True)
    app.state.sso = _sso(settings)
    app.state.app_ports = None
    if settings.apps.ports() is not None:  # one port per app: listened on again at once
        app.state.app_ports = AppPorts(app, settings, sessionmaker)
        await app.state.app_ports.restore()
    try:
        # Read by the health endpoints and /metrics; see loop_table.py.
        loops = app.state.loops = app.state.metrics.loops = loop_table.build(app)
        loops.start(off=app.state.loops_off)
        try:
            with heap.settled():
                yield
        finally:
            await loops.stop()
            await app.state.links.close()
            await app.state.activity.close()
            if app.state.app_ports is not None:
                await app.state.app_ports.close()
    finally:
        if app.state.sso is not None:
            await app.state.sso.provider.close()
        await app.state.model_store.close()
        app.state.login_throttle.checks.close()
        await database.close()


def _sso(settings: ManagerSettings) -> Any:
    """Single sign-on's state when ``auth.oidc`` is on (imported only then: Authlib and
    joserfc stay out of a manager without it), else None."""
    if not settings.auth.oidc.issuer:
        return None
    from gpuslice.manager.services.sso import open_sso

    return open_sso(settings)


async def _storage(settings: ManagerSettings) -> StorageFS:
    """The storage root, made private to the manager (folders inside belong to the session
    user, so that sessions and the API can both change their files)."""
    owner = settings.storage.uid_gid
    storage = StorageFS(settings.storage_root, owner)
    await asyncio.to_thread(storage.prepare)
    if not may_chown() and os.geteuid() != owner[0]:
        log.warning(
            "the manager runs as uid %d, neither root nor the session user %d: it cannot give "
            "folders to the session user, and files sessions write may not be deletable "
            "through the API (run it as root or as uid %d)", os.geteuid(), owner[0], owner[0])
    return storage
