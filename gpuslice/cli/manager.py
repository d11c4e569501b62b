"""`gpuslice manager serve`: the manager alone, for installs with agents on other nodes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli._serve import log_say, log_to_stderr
from gpuslice.cli.output import CliError, friendly

if TYPE_CHECKING:
    from gpuslice.manager.settings import ManagerSettings

app = typer.Typer(help="Run the manager alone (multi-node installs).", no_args_is_help=True)


@app.command("serve")
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
    log_to_stderr(settings.log)
    log_say("gpuslice.manager")(
        f"manager: http://{host}:{port} (API docs at /docs); data in {settings.data_dir}"
    )
    ManagerServer(create_app(settings), host, port).run()


def _manager_settings(config: Path | None) -> ManagerSettings:
    from gpuslice.manager.settings import load_settings

    try:
        return load_settings(config)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"manager settings: {err}", 2) from None
