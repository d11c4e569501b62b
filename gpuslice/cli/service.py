"""`gpuslice service install / uninstall manager|agent|up`: run a part as a systemd service.

The unit (see `gpuslice.ops.systemd`) runs `gpuslice <part> serve` (or `gpuslice up`) of this
installation with `--config FILE` and any options after `--`, as `--user` (the manager: the
system user `gpuslice`, made if missing; the agent and `up`: root), restarting on failure.
Without a running systemd the command says so and prints the unit (exit code 1); `--print`
only prints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gpuslice.cli.output import CliError, console, err_console, friendly

if TYPE_CHECKING:
    from gpuslice.ops.systemd import Part, UnitSpec

T = TypeVar("T")
app = typer.Typer(
    help="Run the manager, an agent or the whole platform (up) as a systemd service.",
    no_args_is_help=True,
)
_LOCAL_HOSTS = {None, "", "localhost", "127.0.0.1", "::1"}


@app.command("install")
@friendly
def install(
    part: Annotated[str, typer.Argument(help="manager, agent or up.")],
    serve_args: Annotated[list[str] | None, typer.Argument(
        help="Options for `gpuslice PART serve` or `gpuslice up`, after `--` (e.g. -- --host "
             "0.0.0.0).", show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(help="Its TOML settings file.")] = None,
    user: Annotated[str | None, typer.Option(
        help="Run it as this user (default: the manager as the system user gpuslice, made if "
             "missing; agent and up as root).")] = None,
    print_only: Annotated[bool, typer.Option(
        "--print", help="Only print the unit; install nothing.")] = False,
) -> None:
    """Write a systemd unit for the manager, an agent or `up`, enable it and start it (it
    returns once the part serves)."""
    from gpuslice.ops import systemd

    checked = _part(part)
    args = serve_args or []
    with _errors():
        data_dir, names_it = _data_dir(checked, config, args)
        spec = systemd.spec_for(checked, config=config, user=user, serve_args=args,
                                local_after=_local_services(checked, config),
                                data_dir=data_dir, names_data_dir=names_it)
    if print_only:
        sys.stdout.write(systemd.render(spec))
        return
    if not systemd.systemd_running():
        err_console.print(
            f"systemd is not running on this machine: nothing installed. The unit is below; "
            f"save it as {systemd.UNIT_DIR / spec.name} on a machine with systemd and run "
            f"`systemctl enable --now {spec.name}`.", markup=False)
        sys.stdout.write(systemd.render(spec))
        raise typer.Exit(1)
    with _errors():
        unit = systemd.install(spec, systemd.systemctl)
    _installed(spec, unit)


@app.command("uninstall")
@friendly
def uninstall(part: Annotated[str, typer.Argument(help="manager, agent or up.")]) -> None:
    """Stop and disable the service and remove its unit (its environment file stays)."""
    from gpuslice.ops import systemd

    checked = _part(part)
    running = systemd.systemd_running()
    with _errors():
        removed = systemd.uninstall(checked, systemd.systemctl if running else None)
    if removed is None:
        raise CliError(f"gpuslice-{checked} is not installed (no {systemd.UNIT_DIR}/"
                       f"gpuslice-{checked}.service)")
    console.print(f"removed {removed}" + ("" if running else " (systemd is not running here)")
                  + f"; {systemd.ENV_DIR / checked}.env is kept", markup=False)


def _part(value: str) -> Part:
    if value not in ("manager", "agent", "up"):
        raise CliError(f"PART: {value!r} is not a part; use manager, agent or up", 2)
    return value  # type: ignore[return-value]


def _data_dir(part: Part, config: Path | None, args: list[str]) -> tuple[Path | None, bool]:
    """Where the part keeps its data, and whether the unit must say so: the manager's and
    `up`'s go to /var/lib/gpuslice unless their settings or options name one (the agent, as
    root, keeps its default)."""
    from gpuslice.ops.systemd import DATA_DIR

    if part == "agent":
        return None, False
    if part == "up":
        given = _option(args, "--data-dir")
        return (Path(given).expanduser().resolve(), False) if given else (DATA_DIR, True)
    from gpuslice.manager.settings import load_settings

    settings = _load(lambda: load_settings(config))
    if "data_dir" in settings.model_fields_set:
        return settings.data_dir.resolve(), False
    return DATA_DIR, True


def _option(args: list[str], name: str) -> str | None:
    """The last value of ``name`` among ``args`` (``--name VALUE`` or ``--name=VALUE``)."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _local_services(part: Part, config: Path | None) -> list[str]:
    """What the part needs that runs on this machine: Docker (agent, up), PostgreSQL
    (manager, when its database is here)."""
    if part == "up":
        return ["docker.service"]
    if part == "agent":
        from gpuslice.agent.settings import load_agent_settings

        docker = _load(lambda: load_agent_settings(config)).docker_url
        return ["docker.service"] if not docker or docker.startswith("unix://") else []
    from sqlalchemy.engine import make_url

    from gpuslice.manager.settings import load_settings

    url = make_url(_load(lambda: load_settings(config)).database_url)
    local = url.get_backend_name() == "postgresql" and url.host in _LOCAL_HOSTS
    return ["postgresql.service"] if local else []


def _load(read: Callable[[], T]) -> T:
    try:
        return read()
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"--config: {err}", 2) from None


@contextmanager
def _errors() -> Iterator[None]:
    from gpuslice.ops.systemd import ServiceError

    try:
        yield
    except ServiceError as err:
        raise CliError(str(err)) from None


def _installed(spec: UnitSpec, unit: Path) -> None:
    name = spec.name.removesuffix(".service")
    console.print(f"installed {unit} and started it (settings: {spec.env_file}"
                  + (f", {spec.config}" if spec.config else "") + ")", markup=False)
    console.print(f"  status: systemctl status {name}    logs: journalctl -u {name} -f",
                  markup=False)
