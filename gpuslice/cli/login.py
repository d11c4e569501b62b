"""`gpuslice login URL`: keep an API token for this machine."""

from __future__ import annotations

import getpass
import socket
import sys
from typing import Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly
from gpuslice.client import Client, ClientConfig, save_config


@friendly
def login(
    url: Annotated[str, typer.Argument(help="The manager, e.g. http://127.0.0.1:8080")],
    username: Annotated[str | None, typer.Option(help="Default: asked.")] = None,
    password_stdin: Annotated[bool, typer.Option(help="Read the password from stdin.")] = False,
    sso: Annotated[bool, typer.Option(
        help="Sign in through a browser (the manager's single sign-on or its login page); "
        "the browser comes back to this machine's 127.0.0.1.")] = False,
    device: Annotated[bool, typer.Option(
        help="Print a code to approve in a browser signed in to the manager (its /device "
        "page): for a machine without a browser, e.g. over SSH.")] = False,
) -> None:
    """Log in and keep an API token for this machine in ~/.config/gpuslice (mode 0600).

    With --sso: through a browser on this machine; with --sso --device: a code to approve in
    any browser signed in to the manager."""
    if not url.startswith(("http://", "https://")):
        raise CliError(f"URL must start with http:// or https://, got {url!r}", 2)
    if device:
        from gpuslice.cli.device_login import device_login

        device_login(url)
        return
    if sso:
        from gpuslice.cli.loopback_login import loopback_login

        loopback_login(url)
        return
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
