"""The state of a session's apps, and starting one, by asking the session's agent (``apps``
requests on the channel): the agent alone knows what runs in the container."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.agents import (
    AppLaunch,
    AppsAnswer,
    AppsAsk,
    AppState,
    AppStatus,
    ListeningPort,
)
from gpuslice.common.schemas.apps import AppList, AppPublic
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.errors import AgentTimeout, Conflict
from gpuslice.manager.services.apps import access, origins
from gpuslice.manager.services.channel import Channel
from gpuslice.manager.services.images import app_catalog as catalog
from gpuslice.manager.services.images.app_catalog import SessionApp
from gpuslice.manager.settings import ManagerSettings

LOG_LINES = 20  # of a failed app's output, in the error that says it failed


async def list_apps(channel: Channel, db: AsyncSession, viewer: UserRow, session_id: str,
                    settings: ManagerSettings, base_url: str) -> AppList:
    """Every app of a RUNNING session the viewer may open, with its state and URL: the
    terminal, its image's apps, then each other port a process in it serves (named by its
    number), as the agent finds them now."""
    row = await access.openable(db, viewer, session_id, settings.apps)
    meta = await catalog.image_meta(db, row.image)
    secret = await catalog.secret_of(db, row)
    apps = catalog.apps_of(meta)
    launches = [catalog.launch(row.id, secret, a.image_app) for a in apps if a.image_app]
    assert row.node_id is not None  # openable() checked it runs on a node
    answer = await _ask(channel, row.node_id, row.id, f"session {row.name}",
                        AppsAsk(apps=launches, ports=True), settings.sessions.log_timeout)
    states = {s.name: s for s in answer.apps}
    served = {p.port: p for p in answer.ports}
    listed = [_public(row.id, app, states.get(app.name), base_url, settings,
                      served.pop(app.port, None) if app.port is not None else None)
              for app in apps]
    return AppList(session_id=row.id, apps=listed + [
        _discovered(row.id, port, base_url, settings) for port in served.values()
    ])


async def start_app(channel: Channel, db: AsyncSession, viewer: UserRow, session_id: str,
                    name: str, settings: ManagerSettings, base_url: str) -> AppPublic:
    """Start the app unless it runs, and wait until it answers (up to its start timeout):
    ``ready``; ``Conflict`` ``app_failed`` with its exit code and last lines otherwise."""
    route = await access.route(db, viewer, session_id, name, settings.apps)
    if route.launch is None:  # the terminal or a served port: nothing to start
        return _public(route.session_id, route.app, None, base_url, settings)
    wait = route.launch.start_timeout_ms / 1000 + settings.sessions.log_timeout
    answer = await _ask(channel, route.node_id, route.session_id,
                        f"session {route.session_name}",
                        AppsAsk(apps=[route.launch], start=name), wait)
    status = next((s for s in answer.apps if s.name == name), None)
    if status is None or status.state is not AppState.READY:
        raise Conflict(failure(route.launch, status), code="app_failed")
    return _public(route.session_id, route.app, status, base_url, settings)


def failure(launch: AppLaunch, status: AppStatus | None) -> str:
    """Why an app is not running, with its exit code and last lines when it has them."""
    if status is None:
        return f"{launch.name}: the agent did not say"
    lines = "".join(status.logs.splitlines(keepends=True)[-LOG_LINES:]).rstrip()
    code = f" (exit code {status.exit_code})" if status.exit_code is not None else ""
    text = f"{launch.name} failed to start{code}: {status.message}"
    return f"{text}\n{lines}" if lines else text


async def _ask(channel: Channel, node_id: str, session_id: str, about: str, ask: AppsAsk,
               timeout: float) -> AppsAnswer:
    answer = await channel.ask(node_id, ask, AppsAnswer, timeout=timeout,
                               session_id=session_id, about=about)
    if answer is None:
        raise AgentTimeout(f"the agent of {about} did not report its apps within {timeout:g} s")
    if answer.error:
        raise Conflict(answer.error, code="apps_failed")
    return answer


def app_url(base_url: str, session_id: str, name: str, settings: ManagerSettings) -> str:
    """Where a browser opens an app: its own origin; the terminal, our page on the
    manager's."""
    if name == catalog.TERMINAL:
        return f"{base_url.rstrip('/')}/s/{session_id}/{name}/"
    return origins.app_url(base_url, session_id, name, settings.apps)


def _public(session_id: str, app: SessionApp, status: AppStatus | None,
            base_url: str, settings: ManagerSettings,
            served: ListeningPort | None = None) -> AppPublic:
    state = AppState.READY if app.image_app is None else (
        status.state if status is not None else AppState.STOPPED)
    return AppPublic(
        name=app.name, protocol=app.protocol, port=app.port, state=state,
        url=app_url(base_url, session_id, app.name, settings),
        exit_code=status.exit_code if status else None,
        logs=status.logs if status and status.state is AppState.FAILED else "",
        message=status.message if status else "",
        process=served.process if served else "", command=served.command if served else "",
    )


def _discovered(session_id: str, served: ListeningPort, base_url: str,
                settings: ManagerSettings) -> AppPublic:
    """A port no app declares: an app named by its number, at its own origin."""
    name = str(served.port)
    return AppPublic(
        name=name, protocol="tcp", port=served.port, state=AppState.READY,
        url=app_url(base_url, session_id, name, settings),
        process=served.process, command=served.command, discovered=True,
        message=f"served by {served.process or 'a process'} in the session",
    )
