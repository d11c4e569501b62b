"""`gpuslice admin ldap test`: what the directory says, as the manager's service account."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuslice.cli.output import JsonOpt, console, friendly, print_json
from gpuslice.client import Client

app = typer.Typer(help="The LDAP directory users sign in with (auth.ldap).",
                  no_args_is_help=True)


@app.command("test")
@friendly
def ldap_test(
    user: Annotated[str | None, typer.Option(
        "--user", help="Also look this user up: their subject, groups, and what gpuslice "
        "would do with them.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search the directory as the manager's service account (the manager's own settings);
    with --user, whether that user may sign in, as an admin or not, and the projects their
    groups give. Never binds as the user."""
    with Client.from_config() as client:
        result = client.test_ldap(user)
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    console.print(f"the directory at {result.url} answers gpuslice's service account",
                  markup=False)
    if result.user is None:
        return
    if not result.found:
        console.print(f"no entry (or more than one) is named {result.user}", markup=False)
        raise typer.Exit(1)
    role = {True: "admin", False: "user", None: "as an admin sets it"}[result.admin]
    lines = [f"user: {result.user}", f"dn: {result.dn}", f"subject: {result.subject}",
             f"groups: {', '.join(result.groups) or '-'}",
             f"locked: {'yes' if result.locked else 'no'}",
             f"may sign in: {'yes' if result.allowed and not result.locked else 'no'}",
             f"role: {role}", f"projects: {', '.join(result.projects) or '-'}"]
    for line in lines:
        console.print(line, markup=False)
