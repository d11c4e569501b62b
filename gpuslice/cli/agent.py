"""`gpuslice agent serve`: a node agent alone, joining a manager that runs elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuslice.cli._serve import log_say, log_to_stderr, run_until_signal
from gpuslice.cli.output import CliError, friendly

app = typer.Typer(help="Run a node agent alone (multi-node installs).", no_args_is_help=True)


@app.command("serve")
@friendly
def agent_serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file.")] = None,
) -> None:
    """A node agent from a TOML file plus GPUSLICE_AGENT_* variables."""
    from gpuslice.agent.capshim import ShimError
    from gpuslice.agent.config import load_agent_settings
    from gpuslice.agent.isolation.network import IsolationError
    from gpuslice.agent.service import Agent

    try:
        settings = load_agent_settings(config)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"agent settings: {err}", 2) from None
    log_to_stderr(settings.log)
    say = log_say("gpuslice.agent")
    try:
        run_until_signal(lambda stop: Agent(settings, say=say).run(stop))
    except (IsolationError, ShimError) as err:
        raise CliError(str(err)) from None
