"""Running a part of the platform in the foreground: `up`, `manager serve`, `agent serve`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuslice.cli.output import CliError, console

if TYPE_CHECKING:
    from fastapi import FastAPI

    from gpuslice.common.local_dirs import DirLock
    from gpuslice.manager.settings import ManagerSettings

if TYPE_CHECKING:
    from gpuslice.common.logs import LogSettings


def run_until_signal(main: Callable[[asyncio.Event], Coroutine[None, None, None]]) -> None:
    """Run ``main(stop)`` until it returns; SIGINT or SIGTERM sets ``stop``."""
    _run(_until_signal(main))


def say(text: str) -> None:
    console.print(text, markup=False)


def log_say(name: str) -> Callable[[str], None]:
    """A ``say`` for a service (`manager serve`, `agent serve`): what it tells its operator
    goes to the log, one line per event in the configured format, like everything else."""
    logger = logging.getLogger(name)
    return logger.info


def log_to_stderr(settings: LogSettings | None = None, quiet: bool = False) -> None:
    """One line per event on stderr, text or JSON (see `gpuslice.common.logs`)."""
    from gpuslice.common.logs import LogSettings, configure

    settings = settings or LogSettings()
    if quiet and settings.level in ("debug", "info"):
        settings = settings.model_copy(update={"level": "warning"})
    configure(settings)


def check_port(host: str, port: int) -> None:
    """A port someone else listens on is one line, before anything starts."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:
                raise CliError(f"{host} is not an address of this machine: pick another with "
                               "--host (127.0.0.1: this machine only; 0.0.0.0: every network)"
                               ) from None
            why = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be used ({err})"
            raise CliError(f"port {port} on {host} {why}: pick another with --port") from None


def prepare_data_dir(path: Path, option: str) -> Path:
    """The data directory, made and proven writable with room to spare (else one line)."""
    from gpuslice.common.local_dirs import DirProblem, prepare_dir

    try:
        return prepare_dir(path, option)
    except DirProblem as err:
        raise CliError(str(err)) from None


def lock_data_dir(path: Path, name: str, what: str,
                  **info: object) -> tuple[DirLock, dict[str, object]]:
    """Hold the lock ``path/name`` for this process's life: one line (naming ``what`` holds
    it, its pid, port and URL) when a live process holds it. Returns the lock and what a
    killed previous holder left (empty after a clean stop)."""
    from gpuslice.common.local_dirs import Busy, DirLock

    lock = DirLock(path / name)
    try:
        previous = lock.acquire(**info)
    except Busy as busy:
        holder = busy.holder
        where = f", port {holder['port']}" if holder.get("port") else ""
        use = f": use it ({holder['url']}), or stop it" if holder.get("url") else ": stop it"
        raise CliError(
            f"{what} is already running on {path} (pid {holder.get('pid', '?')}{where}){use} "
            f"first (Ctrl-C where it runs, or `kill {holder.get('pid', 'PID')}`)"
        ) from None
    except OSError as err:
        from gpuslice.common.local_dirs import describe_os_error

        raise CliError(describe_os_error(err, path, "--data-dir")) from None
    return lock, previous or {}


@dataclass(frozen=True, slots=True)
class Serving:
    task: asyncio.Task[None]  # the server's: done when it stopped
    app: FastAPI  # what it serves, started (for a caller in this process, e.g. `up`'s agent)
    url: str  # where it listens (scheme, address and port as given)


@contextlib.asynccontextmanager
async def manager_running(settings: ManagerSettings, host: str, port: int
                          ) -> AsyncIterator[Serving]:
    """The manager, listening, for the time of the ``async with``. Its database is opened
    first, so that a database that is down, locked, full or newer than this code is one line
    and no server starts."""
    from gpuslice.manager.app import create_app
    from gpuslice.manager.server import ManagerServer
    from gpuslice.manager.startup import StartupError, open_database

    check_port(host, port)
    try:
        database = await open_database(settings)
    except StartupError as err:
        raise CliError(str(err)) from None
    app = create_app(settings, database)
    server = ManagerServer(app, host, port, settings.server)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                raise CliError(f"the manager could not start on {host}:{port}")
            await asyncio.sleep(0.05)
        yield Serving(serving, app, f"{server.scheme}://{host}:{port}")
    finally:
        server.exit()
        with contextlib.suppress(Exception):
            await serving
        await database.close()  # when the lifespan never ran (a failed start)


async def _until_signal(main: Callable[[asyncio.Event], Coroutine[None, None, None]]) -> None:
    from gpuslice.ops import notify

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop_now() -> None:
        if not stop.is_set():
            notify.stopping()  # systemd shows "deactivating" while we drain, not "active"
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_now)
    watchdog = asyncio.create_task(notify.keep_watchdog_fed(stop))
    try:
        await main(stop)
    finally:
        stop.set()
        await watchdog


async def until_ready(main: Coroutine[None, None, None], ready: asyncio.Event,
                      status: str) -> None:
    """Run ``main``; tell systemd READY=1 (with ``status``) once ``ready`` is set, not before:
    a unit ordered after this one must find it working."""
    from gpuslice.ops import notify

    task = asyncio.create_task(main)
    waiting = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set() and not task.done():
            notify.ready(status)
        await task
    finally:
        waiting.cancel()
        task.cancel()  # only when this wait itself was cancelled: otherwise it is done


# Optional modules that libraries on the hot path try to import on every call: httpcore looks
# for sniffio at every request and connection release, to name the event loop (asyncio without
# it). Not installed, each attempt searched sys.path again: ~37 us, about 3% of `gpuslice up`'s
# CPU under bench/throughput.py. Marked absent in ``sys.modules``, the import fails at once
# (~1 us), exactly as it would have.
TRIED_ON_EVERY_CALL = ("sniffio",)


def absent_at_once(names: tuple[str, ...] = TRIED_ON_EVERY_CALL) -> None:
    """Make importing each of ``names`` that is not installed fail without a search."""
    for name in names:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            # the import system's own mark: ModuleNotFoundError (typeshed allows modules only)
            sys.modules[name] = None  # type: ignore[assignment]


def _run(main: Coroutine[None, None, None]) -> None:
    """Run on uvloop when it is installed (it comes with uvicorn[standard]): the manager and
    agent are I/O bound, and uvloop's sockets shave latency off every request."""
    absent_at_once()
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
