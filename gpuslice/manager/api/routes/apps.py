"""A session's apps: list them, start one; the terminal's WebSocket, and port forwarding's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, WebSocket

from gpuslice.common.schemas.apps import AppList, AppPublic
from gpuslice.common.schemas.streams import TERMINAL_ID
from gpuslice.manager.api.deps import ChannelDep, CurrentUser, DbDep, SettingsDep
from gpuslice.manager.proxy import serve, tunnels
from gpuslice.manager.proxy.ports import AppPorts
from gpuslice.manager.services.apps import states

router = APIRouter(prefix="/sessions", tags=["apps"])
AppName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9-]{0,31}$")]


@router.get("/{session_id}/apps")
async def list_apps(session_id: str, request: Request, db: DbDep, user: CurrentUser,
                    channel: ChannelDep, settings: SettingsDep) -> AppList:
    """The apps of a RUNNING session (its terminal, and its image's), each with its state
    (`stopped`, `starting`, `ready`, `failed`) and the URL a browser opens it at. Its owner's
    (admins': with `apps.admin_access`); 409 `not_running`."""
    listed = await states.list_apps(channel, db, user, session_id, settings,
                                    str(request.base_url))
    ports: AppPorts | None = request.app.state.app_ports  # apps.port_range: a port each
    return listed if ports is None else await ports.with_urls(listed, request.url.scheme,
                                                              str(request.base_url))


@router.post("/{session_id}/apps/{name}/start")
async def start_app(session_id: str, name: AppName, request: Request, db: DbDep,
                    user: CurrentUser, channel: ChannelDep, settings: SettingsDep) -> AppPublic:
    """Start an app unless it runs, and wait until it answers (up to its start timeout): its
    state `ready` and URL; 409 `app_failed` with its exit code and last lines."""
    started = await states.start_app(channel, db, user, session_id, name, settings,
                                     str(request.base_url))
    ports: AppPorts | None = request.app.state.app_ports
    return started if ports is None else await ports.with_url(
        started, session_id, request.url.scheme, str(request.base_url))


@router.websocket("/{session_id}/terminal")
async def terminal(
    websocket: WebSocket,
    session_id: str,
    terminal: Annotated[str | None, Query(pattern=TERMINAL_ID)] = None,
    rows: Annotated[int, Query(ge=1, le=1000)] = 24,
    cols: Annotated[int, Query(ge=1, le=1000)] = 80,
) -> None:
    """The session's terminal: binary messages are its bytes both ways, text messages
    `{"op": "resize", "rows", "cols"}` from the client and `attached` (the terminal's id: pass
    it as `terminal` to reconnect to the same shell) and `exit` (its code) from the server."""
    await serve.serve_terminal(websocket, session_id, terminal, rows, cols)


@router.websocket("/{session_id}/ports/{port}")
async def port_forward(websocket: WebSocket, session_id: str, port: str) -> None:
    """One TCP connection to `port` (1 to 65535) of a RUNNING session (who may open its
    terminal may): binary messages are its bytes both ways, a text `{"op": "end"}` says that
    side writes no more. Refused before the upgrade: 401, 404 (not yours), 409 `not_running`,
    422 `bad_port`, 502 `port_closed` (nothing listens there)."""
    await tunnels.serve_port(websocket, session_id, port)
