"""Running the platform: `gpuslice up` (all in one), `manager serve`, `agent serve`."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly

manager_app = typer.Typer(help="Run the manager alone (multi-node installs).",
                          no_args_is_help=True)
agent_app = typer.Typer(help="Run a node agent alone (multi-node installs).", no_args_is_help=True)

DEFAULT_DATA_DIR = Path("~/.local/share/gpuslice")
_MOCK_RE = re.compile(r"^(?P<count>\d+)x(?P<mem>[0-9.]+[A-Za-z]*)(?::(?P<model>.+))?$")


@manager_app.command("serve")
@friendly
def manager_serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port.")] = 8080,
) -> None:
    """The manager (API, scheduler, web console) from a TOML file plus GPUSLICE_* variables."""
    from gpuslice.manager.app import create_app
    from gpuslice.manager.server import ManagerServer

    settings = _manager_settings(config)
    _logging()
    console.print(f"manager: http://{host}:{port} (API docs at /docs); data in "
                  f"{settings.data_dir}", markup=False)
    ManagerServer(create_app(settings), host, port).run()


@agent_app.command("serve")
@friendly
def agent_serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file.")] = None,
) -> None:
    """A node agent from a TOML file plus GPUSLICE_AGENT_* variables."""
    from gpuslice.agent.config import load_agent_settings
    from gpuslice.agent.service import Agent

    try:
        settings = load_agent_settings(config)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"agent settings: {err}", 2) from None
    _logging()
    _run(_until_signal(lambda stop: Agent(settings, say=_say).run(stop)))


@friendly
def up(
    data_dir: Annotated[Path, typer.Option(help="Database, credentials, agent state.")] = (
        DEFAULT_DATA_DIR
    ),
    port: Annotated[int, typer.Option(help="API and console port.")] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    mock_gpus: Annotated[str, typer.Option(
        help="Simulated GPUs when no NVIDIA GPU is found: COUNTxMEM[:MODEL], comma-separated.",
    )] = "1x8GiB",
    fgpu_per_gpu: Annotated[str, typer.Option(help="fGPU per physical GPU.")] = "1",
    node_name: Annotated[str | None, typer.Option(help="This node's name.")] = None,
) -> None:
    """Run everything on this machine: manager (SQLite) and a local agent, in one command."""
    from gpuslice.cli.up import UpOptions, run_up

    options = UpOptions(
        data_dir=data_dir.expanduser().resolve(), host=host, port=port,
        mock_gpus=parse_mock_gpus(mock_gpus), fgpu_per_gpu=fgpu_per_gpu,
        node_name=node_name or _default_node_name(),
    )
    _logging(quiet=True)
    _run(_until_signal(lambda stop: run_up(options, stop, _say)))


def parse_mock_gpus(text: str) -> list[dict[str, object]]:
    """``"2x8GiB,1x16g:Mock T4"`` -> the agent's ``[[gpu]]`` entries."""
    from gpuslice.common.resources import parse_mem

    gpus = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _MOCK_RE.match(part)
        if not match:
            raise CliError(f"--mock-gpus: {part!r} is not COUNTxMEM[:MODEL], e.g. 1x8GiB", 2)
        count = int(match["count"])
        if not 1 <= count <= 64:
            raise CliError(f"--mock-gpus: count must be 1-64, got {count}", 2)
        gpus.append({"count": count, "memory": parse_mem(match["mem"], field="--mock-gpus"),
                     "model": match["model"] or "Mock GPU"})
    return gpus


def _manager_settings(config: Path | None, **overrides: object):  # noqa: ANN202
    from gpuslice.manager.settings import load_settings

    try:
        return load_settings(config, **overrides)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"manager settings: {err}", 2) from None


async def _until_signal(main) -> None:  # noqa: ANN001
    """Run ``main(stop)`` until it returns or SIGINT/SIGTERM sets ``stop``."""
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


def _say(text: str) -> None:
    console.print(text, markup=False)


def _logging(quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _default_node_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:128].lstrip("-._")
    return name or "local"
