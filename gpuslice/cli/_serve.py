"""Running a part of the platform in the foreground: `up`, `manager serve`, `agent serve`."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine

from gpuslice.cli.output import console


def run_until_signal(main: Callable[[asyncio.Event], Coroutine[None, None, None]]) -> None:
    """Run ``main(stop)`` until it returns; SIGINT or SIGTERM sets ``stop``."""
    _run(_until_signal(main))


def say(text: str) -> None:
    console.print(text, markup=False)


def log_to_stderr(quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


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
