"""Running a part of the platform in the foreground: `up`, `manager serve`, `agent serve`."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from gpuslice.cli.output import console

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


async def _until_signal(main: Callable[[asyncio.Event], Coroutine[None, None, None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await main(stop)


def _run(main: Coroutine[None, None, None]) -> None:
    """Run on uvloop when it is installed (it comes with uvicorn[standard]): the manager and
    agent are I/O bound, and uvloop's sockets shave latency off every request."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
