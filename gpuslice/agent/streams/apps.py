"""Apps in session containers: started on first use, their state, their last lines of output.

An app is a process the image declares (its command from the manager, with the session's
token and base path filled in), run as the session's user by an exec in the container and
reached on its port at the container's address. States: ``starting`` until its port answers
(``ready``), ``failed`` when it exits first (its exit code and last lines) or stays silent past
its start timeout (then it is stopped). A slow app is never a failure before its own timeout.

What is kept here is this process's knowledge only: after an agent restart an app that still
answers on its port is ``ready`` again, one that does not is ``stopped`` (started anew on the
next open). One start at a time per app; concurrent opens wait for the same start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import deque
from dataclasses import dataclass, field

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.execs import ExecProcess
from gpuslice.common.schemas.agents import AppLaunch, AppState, AppStatus

log = logging.getLogger(__name__)
LOG_LINES = 40  # the last lines of an app's output kept for its state
LOG_BYTES = 16_000
PROBE_EVERY = 0.2  # seconds between port checks while an app starts
VERIFIED_FOR = 5.0  # seconds an app this process did not start counts as answering after a check


class Addresses:
    """Where each session's container is on its Docker network (cached: asked per request)."""

    def __init__(self, runtime: DockerRuntime) -> None:
        self.runtime = runtime
        self._known: dict[str, str] = {}

    async def of(self, session_id: str, *, fresh: bool = False) -> str | None:
        if not fresh and session_id in self._known:
            return self._known[session_id]
        state = await self.runtime.find(session_id)
        address = state.ip_address if state is not None and state.running else ""
        if not address:
            self._known.pop(session_id, None)
            return None
        self._known[session_id] = address
        return address

    def forget(self, session_id: str) -> None:
        self._known.pop(session_id, None)

    def keep(self, session_ids: set[str]) -> None:
        for gone in set(self._known) - session_ids:
            del self._known[gone]


@dataclass
class _App:
    launch: AppLaunch
    state: AppState = AppState.STOPPED
    process: ExecProcess | None = None
    exit_code: int | None = None
    message: str = ""
    output: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    starting: asyncio.Task[None] | None = None
    reader: asyncio.Task[None] | None = None
    verified: float = 0.0  # when its port last answered a check

    def status(self) -> AppStatus:
        logs = "".join(self.output)[-LOG_BYTES:]
        return AppStatus(name=self.launch.name, state=self.state, exit_code=self.exit_code,
                         logs=logs, message=self.message[:2000])


class AppSupervisor:
    """Starts apps in session containers and knows their state."""

    def __init__(self, runtime: DockerRuntime, addresses: Addresses) -> None:
        self.runtime = runtime
        self.addresses = addresses
        self._apps: dict[tuple[str, str], _App] = {}

    async def status(self, session_id: str, launch: AppLaunch) -> AppStatus:
        """The app's state now; one this process did not start is ``ready`` if it answers."""
        app = self._app(session_id, launch)
        if app.starting is None:
            if await self._answers(session_id, launch.port):
                app.state, app.message, app.verified = AppState.READY, "", time.monotonic()
            elif app.state is AppState.READY:
                app.state = AppState.STOPPED
                app.message = f"it no longer answers on port {launch.port}"
        return app.status()

    def ready(self, session_id: str, launch: AppLaunch) -> bool:
        """Whether the app is known to answer (a request's fast path: no port check, nothing
        built; otherwise :meth:`ensure`)."""
        app = self._apps.get((session_id, launch.name))
        return app is not None and app.state is AppState.READY and app.launch == launch and (
            app.process is not None or time.monotonic() - app.verified < VERIFIED_FOR)

    async def ensure(self, session_id: str, launch: AppLaunch) -> AppStatus:
        """The app running and answering, started if needed; waits up to its start timeout.
        ``ready`` or ``failed`` (``stopped`` for an app the platform cannot start)."""
        app = self._app(session_id, launch)
        if self.ready(session_id, launch):
            return app.status()
        if app.starting is None:  # no await before this is set: one start at a time
            app.starting = asyncio.create_task(self._start(session_id, app))
        await asyncio.shield(app.starting)
        return app.status()

    def mark_gone(self, session_id: str, name: str) -> None:
        """The app refused a connection: unless its process still runs (then it is the app's
        own trouble), look again, and start it, on the next use."""
        app = self._apps.get((session_id, name))
        if app is not None and app.state is AppState.READY and app.process is None:
            app.state, app.verified = AppState.STOPPED, 0.0

    def forget(self, keep: set[str]) -> None:
        """Drop what is known of sessions not in ``keep`` (their containers are gone)."""
        for key in [k for k in self._apps if k[0] not in keep]:
            app = self._apps.pop(key)
            for task in (app.starting, app.reader):
                if task is not None:
                    task.cancel()

    async def close(self) -> None:
        self.forget(set())

    # ------------------------------------------------------------ starting

    def _app(self, session_id: str, launch: AppLaunch) -> _App:
        app = self._apps.get((session_id, launch.name))
        if app is None:
            app = self._apps[(session_id, launch.name)] = _App(launch)
        app.launch = launch  # the manager's latest word (token, command)
        return app

    async def _start(self, session_id: str, app: _App) -> None:
        """Start the app unless it answers already (started by hand, or before a restart)."""
        launch = app.launch
        try:
            if await self._answers(session_id, launch.port, fresh=True):
                app.state, app.message, app.verified = AppState.READY, "", time.monotonic()
                return
            if not launch.command:
                app.message = (f"{launch.name} does not answer on port {launch.port}, and the "
                               "image says no command to start it")
                return
            app.state, app.exit_code, app.message = AppState.STARTING, None, ""
            app.output.clear()
            app.process = await self.runtime.open_exec(session_id, launch.command, tty=False)
            app.reader = asyncio.create_task(self._read(app, app.process))
            deadline = time.monotonic() + launch.start_timeout_ms / 1000
            while app.state is AppState.STARTING:
                if await self._answers(session_id, launch.port):
                    app.state, app.verified = AppState.READY, time.monotonic()
                elif time.monotonic() > deadline:
                    await self._give_up(app)
                else:
                    await asyncio.sleep(PROBE_EVERY)
        except Exception as exc:  # the container went away, Docker failed: a failed start
            app.state, app.message = AppState.FAILED, f"could not start: {exc}"
            log.warning("app %s of session %s: %s", launch.name, session_id, app.message)
        finally:
            app.starting = None

    async def _give_up(self, app: _App) -> None:
        seconds = app.launch.start_timeout_ms / 1000
        app.state = AppState.FAILED
        app.message = (f"{app.launch.name} did not answer on port {app.launch.port} within "
                       f"{seconds:g} s; it was stopped")
        if app.process is not None:
            await app.process.signal(signal.SIGTERM)
            await app.process.close()

    async def _read(self, app: _App, process: ExecProcess) -> None:
        """Keep the app's last lines; once it exits, it has failed (apps serve until stopped)."""
        pending = ""
        with contextlib.suppress(Exception):
            while (chunk := await process.read()) is not None:
                text = pending + chunk.decode(errors="replace")
                *lines, pending = text.split("\n")
                app.output.extend(f"{line[:1000]}\n" for line in lines)
        if pending:
            app.output.append(pending[:1000])
        if app.process is not process:
            return  # a newer start took over
        with contextlib.suppress(Exception):
            app.exit_code = await process.exit_code()
        app.process = None
        if app.state is not AppState.FAILED:
            app.state = AppState.FAILED
            app.message = f"{app.launch.name} exited with code {app.exit_code}"

    async def _answers(self, session_id: str, port: int, *, fresh: bool = False) -> bool:
        address = await self.addresses.of(session_id, fresh=fresh)
        if address is None:
            return False
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), 2.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
