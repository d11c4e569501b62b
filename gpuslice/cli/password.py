"""`gpuslice password`: change your own password."""

from __future__ import annotations

import getpass
import sys
from typing import Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly
from gpuslice.client import Client


@friendly
def password(
    keep_api_tokens: Annotated[bool, typer.Option(
        "--keep-api-tokens", help="Keep your API tokens working (scripts, the SDK).")] = False,
    stdin: Annotated[bool, typer.Option(
        "--stdin", help="Read the current and the new password from stdin, a line each.")] = False,
) -> None:
    """Change your password; your other logins end (API tokens too, unless kept)."""
    if stdin:
        current, new = sys.stdin.readline().rstrip("\n"), sys.stdin.readline().rstrip("\n")
    else:
        current = getpass.getpass("current password: ")
        new = getpass.getpass("new password: ")
        if getpass.getpass("new password again: ") != new:
            raise CliError("the new passwords differ", 2)
    with Client.from_config() as client:
        client.change_password(current, new, keep_api_tokens=keep_api_tokens)
    ended = "other logins" if keep_api_tokens else "other logins and your API tokens"
    console.print(f"password changed; your {ended} ended", markup=False)
