"""`gpuslice agent serve`: a node agent alone, joining a manager that runs elsewhere."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli._serve import (
    lock_data_dir,
    log_say,
    log_to_stderr,
    prepare_data_dir,
    run_until_signal,
    until_ready,
)
from gpuslice.cli.output import CliError, friendly

if TYPE_CHECKING:
    from gpuslice.agent.service import Agent

app = typer.Typer(help="Run a node agent alone (multi-node installs).", no_args_is_help=True)


@app.command("serve")
@friendly
def agent_serve(
    config: Annotated[Path | None, typer.Option(help="TOML settings file.")] = None,
    resource_group: Annotated[str | None, typer.Option(
        "--resource-group", help="The node's resource group when it joins, e.g. a100 "
        "(resource_group in the file; default: \"default\").")] = None,
) -> None:
    """A node agent from a TOML file plus GPUSLICE_AGENT_* variables (a key no setting has,
    in either, stops it)."""
    from gpuslice.agent.capshim import ShimError
    from gpuslice.agent.identity import NameTaken
    from gpuslice.agent.isolation.network import IsolationError
    from gpuslice.agent.manager_link import LinkError, NotRegistered, VersionMismatch
    from gpuslice.agent.service import Agent
    from gpuslice.agent.settings import load_agent_settings

    try:
        overrides = {"resource_group": resource_group} if resource_group else {}
        settings = load_agent_settings(config, **overrides)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"agent settings: {err}", 2) from None
    data_dir = prepare_data_dir(settings.data_dir, "data_dir (GPUSLICE_AGENT_DATA_DIR)")
    # Two agents on one data directory would both run the node's sessions.
    lock, _ = lock_data_dir(data_dir, "agent.lock", "a gpuslice agent")
    log_to_stderr(settings.log)
    say = log_say("gpuslice.agent")
    try:
        run_until_signal(lambda stop: _run_agent(Agent(settings, say=say), stop))
    except (NotRegistered, VersionMismatch, IsolationError, ShimError, NameTaken) as err:
        raise CliError(str(err)) from None
    except LinkError as err:  # the manager refused it outright (a bad join token, ...)
        raise CliError(f"the manager at {settings.manager_url} refused this node: {err}") from None
    finally:
        lock.release()


async def _run_agent(agent: Agent, stop: asyncio.Event) -> None:
    """The agent until ``stop``; systemd hears READY=1 once it joined and the manager has its
    first heartbeat (a session placed on this node from then on gets started)."""
    joined = f"node {agent.settings.node_name} joined {agent.settings.manager_url}"
    await until_ready(agent.run(stop), agent.ready, joined)
