"""`gpuslice login URL` and `gpuslice logout`: the token this machine keeps.

A password login gets a token of kind `cli`, which ends after `auth.cli_token_idle` unused
(30 days by default) and `auth.cli_token_max` after it is made (90 days); `--with-token` keeps a
token made elsewhere (an API token, for CI). `logout` revokes the kept token on the manager and
removes it from the file.
"""

from __future__ import annotations

import getpass
import socket
import sys
from typing import Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly
from gpuslice.client import ApiError, Client, ClientConfig, save_config


@friendly
def login(
    url: Annotated[str, typer.Argument(help="The manager, e.g. http://127.0.0.1:8080")],
    username: Annotated[str | None, typer.Option(help="Default: asked.")] = None,
    password_stdin: Annotated[bool, typer.Option(help="Read the password from stdin.")] = False,
    with_token: Annotated[bool, typer.Option(
        "--with-token", help="Read a token from stdin (an API token, for CI) and keep it "
        "instead of logging in with a password.")] = False,
    sso: Annotated[bool, typer.Option(
        help="Sign in through a browser (the manager's single sign-on or its login page); "
        "the browser comes back to this machine's 127.0.0.1.")] = False,
    device: Annotated[bool, typer.Option(
        help="Print a code to approve in a browser signed in to the manager (its /device "
        "page): for a machine without a browser, e.g. over SSH.")] = False,
) -> None:
    """Log in and keep a token for this machine in ~/.config/gpuslice (mode 0600).

    The token is a CLI login (kind cli): it ends once unused for auth.cli_token_idle, and
    auth.cli_token_max after it was made (the manager's settings: 30 and 90 days by default);
    then log in again. `gpuslice auth status` says when. With --sso: through a browser on this
    machine; with --sso --device: a code to approve in any browser signed in to the manager.
    """
    if not url.startswith(("http://", "https://")):
        raise CliError(f"URL must start with http:// or https://, got {url!r}", 2)
    url = url.rstrip("/")
    if (sso or device) and (with_token or username is not None or password_stdin):
        raise CliError("--sso and --device sign in through a browser: leave out --username, "
                       "--password-stdin and --with-token", 2)
    if device:
        from gpuslice.cli.device_login import device_login

        device_login(url)
        return
    if sso:
        from gpuslice.cli.loopback_login import loopback_login

        loopback_login(url)
        return
    if with_token:
        if username is not None or password_stdin:
            raise CliError("--with-token reads a token, not a password: leave out --username "
                           "and --password-stdin", 2)
        token = sys.stdin.readline().strip()
        if not token:
            raise CliError("--with-token: stdin held no token (give it one line, e.g. "
                           "`echo $GPUSLICE_TOKEN | gpuslice login URL --with-token`)", 2)
    else:
        token = _password_login(url, username, password_stdin)
    with Client(url, token) as client:
        me, info = client.me(), client.token_info()
    path = save_config(ClientConfig(url=url, token=token))
    console.print(f"logged in to {url} as {me.username} ({me.role.value}) with a token of "
                  f"kind {info.kind}, kept in {path}", markup=False)


@friendly
def logout() -> None:
    """Revoke this machine's token on the manager and remove it from ~/.config/gpuslice."""
    from gpuslice.client.config import config_path, stored_config

    stored = stored_config()
    if not stored.url or not stored.token:
        raise CliError(f"you are not logged in (no token in {config_path()})")
    ended = "revoked"
    with Client(stored.url, stored.token) as client:
        try:
            client.logout()
        except ApiError as err:
            if err.status != 401:
                raise  # the manager may still accept it: keep it, so logout can be retried
            ended = "already ended"
    path = save_config(ClientConfig(url=stored.url, token=None))
    console.print(f"logged out of {stored.url}: the token is {ended} and removed from {path}",
                  markup=False)


def _password_login(url: str, username: str | None, password_stdin: bool) -> str:
    username = username or input("username: ")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
    with Client(url) as client:
        return client.cli_login(username, password, socket.gethostname()[:48]).access_token
