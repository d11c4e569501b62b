"""`gpuslice manager serve`: the manager alone, for installs with agents on other nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli._serve import (
    log_say,
    log_to_stderr,
    manager_running,
    prepare_data_dir,
    run_until_signal,
)
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
    tls_cert: Annotated[Path | None, typer.Option(
        help="Serve HTTPS with this PEM certificate (chain); with --tls-key.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Its PEM private key.")] = None,
) -> None:
    """The manager (API, scheduler, web console) from a TOML file plus GPUSLICE_* variables.

    A key no setting has, in the file or a GPUSLICE_* variable, stops it (docs/configuration.md
    names the GPUSLICE_* variables that are not settings)."""
    settings = _manager_settings(config, tls_cert, tls_key)
    prepare_data_dir(settings.data_dir, "data_dir (GPUSLICE_DATA_DIR)")
    log_to_stderr(settings.log)
    scheme = "https" if settings.server.tls_cert is not None else "http"
    log_say("gpuslice.manager")(
        f"manager: {scheme}://{host}:{port} (API docs at /docs); data in {settings.data_dir}"
    )
    run_until_signal(lambda stop: _serve(settings, host, port, stop))


async def _serve(settings: ManagerSettings, host: str, port: int, stop: asyncio.Event) -> None:
    from gpuslice.ops import notify

    async with manager_running(settings, host, port) as running:
        # uvicorn has run the app's startup and its socket listens: connections are answered
        notify.ready(f"serving on {running.url}")
        serving = running.task
        await asyncio.wait([serving, asyncio.create_task(stop.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if serving.done() and not stop.is_set():
            raise CliError("the manager stopped unexpectedly (its log is above)")


def _manager_settings(
    config: Path | None, tls_cert: Path | None, tls_key: Path | None
) -> ManagerSettings:
    from gpuslice.manager.settings import load_settings

    overrides = {}
    if tls_cert is not None or tls_key is not None:
        overrides["server"] = {"tls_cert": tls_cert, "tls_key": tls_key}
    try:
        settings = load_settings(config, **overrides)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"manager settings: {err}", 2) from None
    for path in (settings.server.tls_cert, settings.server.tls_key):
        if path is not None and not path.is_file():
            raise CliError(f"manager settings: TLS file {path} does not exist", 2)
    return settings
