"""The `gpuslice` command."""

from __future__ import annotations

import getpass
import socket
import sys
from typing import Annotated

import typer

from gpuslice import __version__
from gpuslice.cli import admin, agent, image, manager, node, session, token
from gpuslice.cli.output import CliError, console, friendly
from gpuslice.cli.up import up
from gpuslice.client import Client, ClientConfig, save_config

app = typer.Typer(
    name="gpuslice",
    help="Share GPU servers: fractional-GPU compute sessions with a fair scheduler.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(session.app, name="session")
app.add_typer(image.app, name="image")
app.add_typer(node.app, name="node")
app.add_typer(admin.app, name="admin")
app.add_typer(token.app, name="token")
app.add_typer(manager.app, name="manager")
app.add_typer(agent.app, name="agent")
app.command("up")(up)


@app.command("login")
@friendly
def login(
    url: Annotated[str, typer.Argument(help="The manager, e.g. http://127.0.0.1:8080")],
    username: Annotated[str | None, typer.Option(help="Default: asked.")] = None,
    password_stdin: Annotated[bool, typer.Option(help="Read the password from stdin.")] = False,
) -> None:
    """Log in and keep an API token for this machine in ~/.config/gpuslice (mode 0600)."""
    if not url.startswith(("http://", "https://")):
        raise CliError(f"URL must start with http:// or https://, got {url!r}", 2)
    username = username or input("username: ")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
    with Client(url) as client:
        client.login(username, password)
        token = client.create_token(f"cli@{socket.gethostname()}")
        client.token = token.token
        me = client.me()
    path = save_config(ClientConfig(url=url.rstrip("/"), token=token.token))
    console.print(f"logged in to {url} as {me.username} ({me.role.value}); token in {path}",
                  markup=False)


@app.command("version")
def version() -> None:
    """Print the version."""
    console.print(__version__)


def main() -> None:
    try:
        app()
    except CliError as err:  # raised outside a command (should not happen, but stay clean)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None


if __name__ == "__main__":
    main()
