"""One port per app (``apps.port_range``), for setups with neither ``*.localhost`` nor a
wildcard domain: each (session, app) opened gets a port of the range, and
``http(s)://<apps.port_host>:<port>/`` is that app's origin.

The manager listens on each such port itself (one listener per allocated port, opened on
demand; the same ASGI app, told which port a request came in on), closes it when the session
is no longer RUNNING (``sweep``, every ``SWEEP_INTERVAL``) or the manager stops. Allocations are
rows of ``app_ports``, so a restarted manager listens on the same ports again and URLs stay
the same while the session lives. A port another process holds (a second ``gpuslice up`` on
the machine) is skipped: the bind says so. One manager replica per machine: a row is only as
good as the listener of the replica that made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.server import ServerState

from gpuslice.common.schemas.apps import AppList, AppPublic
from gpuslice.common.schemas.sessions import SessionStatus
from gpuslice.manager.db.models import AppPortRow, SessionRow
from gpuslice.manager.errors import Conflict, Unavailable
from gpuslice.manager.server import options
from gpuslice.manager.services.apps.origins import AppOrigin
from gpuslice.manager.services.images.app_catalog import TERMINAL
from gpuslice.manager.settings import ManagerSettings

log = logging.getLogger(__name__)

SCOPE_KEY = "gpuslice.app_port"  # the app port a request came in on (absent: the manager's)
# How soon a port is closed after its session stops running (the gate refuses it meanwhile).
SWEEP_INTERVAL = 2.0
# Any port number of a session is an app: without a cap, one user opening ports 1, 2, 3… would
# take the whole range from everyone.
PER_SESSION = 32
_CLOSE_WAIT = 5.0  # seconds open connections get to end when a port is closed


class _OnPort:
    """The manager's ASGI app, told the app port each request came in on."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app, self.port = app, port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SCOPE_KEY] = self.port
        await self.app(scope, receive, send)


@dataclass(slots=True)
class _Listener:
    at: AppOrigin
    server: asyncio.base_events.Server
    state: ServerState


class AppPorts:
    """The app ports this manager listens on, and their rows."""

    def __init__(self, app: Any, settings: ManagerSettings,
                 sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.app, self.settings, self.sessionmaker = app, settings, sessionmaker
        self.range = settings.apps.ports() or range(0)
        self.host = (settings.apps.port_host
                     or urlsplit(settings.apps.console_url or "").hostname or "localhost")
        self._open: dict[int, _Listener] = {}
        self._lock = asyncio.Lock()

    def at(self, port: int) -> AppOrigin | None:
        """The app served on ``port``; None for a port no longer any app's."""
        listener = self._open.get(port)
        return listener.at if listener is not None else None

    def url(self, scheme: str, port: int) -> str:
        return f"{scheme}://{self.host}:{port}"

    def console_url(self, scheme: str) -> str:
        """Where an app port sends a browser to log in: ``apps.console_url``, else the
        manager's own port on ``port_host``."""
        if self.settings.apps.console_url:
            return self.settings.apps.console_url.rstrip("/")
        port = getattr(self.app.state, "manager_port", None)
        return self.url(scheme, port) if port else f"{scheme}://{self.host}"

    async def port_of(self, session_id: str, app: str) -> int:
        """The app's port, allocated and listened on if it has none yet; ``Unavailable``
        ``no_app_port`` when every port of the range is taken."""
        at = AppOrigin(app, session_id, None)
        async with self._lock:
            for port, listener in self._open.items():
                if (listener.at.app, listener.at.session_id) == (app, session_id):
                    return port
            async with self.sessionmaker() as db:
                row = (await db.execute(select(AppPortRow).where(
                    AppPortRow.session_id == session_id, AppPortRow.app == app))).scalar()
                if row is not None:
                    if await self._listen(row.port, at):
                        return row.port
                    await db.delete(row)  # another process took it meanwhile: a new one
                    await db.commit()
                return await self._allocate(db, at)

    async def _allocate(self, db: AsyncSession, at: AppOrigin) -> int:
        rows = (await db.execute(select(AppPortRow.port, AppPortRow.session_id))).all()
        if sum(1 for _, owner in rows if owner == at.session_id) >= PER_SESSION:
            raise Unavailable(
                f"this session has {PER_SESSION} app ports already, the most one session gets "
                "(apps.port_range is shared by all): they are freed when the session ends",
                code="no_app_port")
        taken = {port for port, _ in rows}
        for port in self.range:
            if port in taken or port in self._open or not await self._listen(port, at):
                continue
            db.add(AppPortRow(port=port, session_id=at.session_id, app=at.app))
            try:
                await db.commit()
            except IntegrityError:  # the session is gone, or another replica took the port
                await db.rollback()
                await self._close(port)
                raise Conflict(f"no port could be recorded for {at.app}: open it again",
                               code="app_port_conflict") from None
            return port
        raise Unavailable(
            f"no free port left in apps.port_range ({self.settings.apps.port_range}): all are "
            "taken by open apps or other programs; widen the range or stop sessions",
            code="no_app_port")

    async def _listen(self, port: int, at: AppOrigin) -> bool:
        """Listen on ``port`` for the app; False when the port is not free."""
        config = uvicorn.Config(_OnPort(self.app, port), host=self._bind(), port=port,
                                lifespan="off",
                                **options(self.settings.apps, self.settings.server))
        config.load()
        state = ServerState()

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state={})

        try:
            server = await asyncio.get_running_loop().create_server(
                protocol, host=config.host, port=port, ssl=config.ssl, backlog=config.backlog)
        except OSError as err:
            log.info("app port %s not free: %s", port, err)
            return False
        self._open[port] = _Listener(AppOrigin(at.app, at.session_id, port), server, state)
        return True

    def _bind(self) -> str:
        return str(getattr(self.app.state, "bind_host", "127.0.0.1"))

    async def restore(self) -> None:
        """After a (re)start: listen again on the ports of RUNNING sessions that are still
        in the range (it may have been narrowed meanwhile); forget the others."""
        async with self._lock, self.sessionmaker() as db:
            rows = (await db.execute(select(AppPortRow, SessionRow.status).join(
                SessionRow, SessionRow.id == AppPortRow.session_id))).all()
            for row, status in rows:
                kept = status == SessionStatus.RUNNING and row.port in self.range
                if not kept or not await self._listen(
                        row.port, AppOrigin(row.app, row.session_id, None)):
                    await db.delete(row)
            await db.commit()

    async def sweep(self) -> None:
        """Close the ports of sessions no longer RUNNING (or gone), and drop their rows."""
        if not self._open:
            return
        async with self._lock, self.sessionmaker() as db:
            live = set((await db.execute(select(SessionRow.id).where(
                SessionRow.id.in_({o.at.session_id for o in self._open.values()}),
                SessionRow.status == SessionStatus.RUNNING))).scalars())
            ended = [p for p, o in self._open.items() if o.at.session_id not in live]
            if ended:
                await db.execute(delete(AppPortRow).where(AppPortRow.port.in_(ended)))
                await db.commit()
        for port in ended:
            await self._close(port)

    async def close(self) -> None:
        """Stop listening on every app port (the rows stay, for the next start)."""
        for port in list(self._open):
            await self._close(port)

    async def _close(self, port: int) -> None:
        listener = self._open.pop(port, None)
        if listener is None:
            return
        listener.server.close()
        for connection in list(listener.state.connections):
            connection.shutdown()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listener.server.wait_closed(), _CLOSE_WAIT)

    async def with_urls(self, listed: AppList, scheme: str, base_url: str) -> AppList:
        """The listing with each app's port URL (the terminal stays the manager's page)."""
        apps = [await self.with_url(app, listed.session_id, scheme, base_url)
                for app in listed.apps]
        return listed.model_copy(update={"apps": apps})

    async def with_url(self, app: AppPublic, session_id: str, scheme: str,
                       base_url: str) -> AppPublic:
        """The app with its port's URL; with no port left for it, the manager's way in
        (``/s/<session>/<app>/``, which says so when opened): a full range is no reason
        to fail a whole listing."""
        if app.name == TERMINAL:
            return app
        try:
            url = self.url(scheme, await self.port_of(session_id, app.name)) + "/"
        except Unavailable:
            url = f"{base_url.rstrip('/')}/s/{session_id}/{app.name}/"
        return app.model_copy(update={"url": url})
