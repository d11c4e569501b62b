"""`gpuslice admin recover`: the local first admin back, on the manager host (break-glass)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gpuslice.cli.admin_backup import ConfigOpt, DataDirOpt, settings_of
from gpuslice.cli.output import CliError, console, friendly


@friendly
def recover(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Do not ask first (scripts).")] = False,
) -> None:
    """Reset the local admin (auth.admin_username) when no admin can log in.

    Run it on the manager host, with the database at hand as `admin backup` has it (the
    manager may keep running): the admin gets a new password, written to admin-credentials in
    the data directory (mode 0600), is made an active admin again (made anew if it was
    deleted), and every token it had ends. The audit log records it, naming this host and
    your OS user.
    """
    from gpuslice.manager.backup import safe_url
    from gpuslice.manager.services.breakglass import RecoverError, recover

    settings = settings_of(config, None, data_dir)
    name, where = settings.auth.admin_username, safe_url(settings.database_url)
    if not yes and not typer.confirm(
            f"reset the admin {name!r} in {where} (a new password; its tokens end)?"):
        raise CliError("nothing changed", 1)
    try:
        done = asyncio.run(recover(settings.database_url, name,
                                   settings.data_dir.expanduser().absolute()))
    except RecoverError as err:
        raise CliError(str(err)) from None
    what = "made anew" if done.created else "reset"
    console.print(f"admin {done.username} {what}: an active admin, {done.tokens_ended} "
                  f"token(s) ended; its new password is in {done.credentials} (mode 0600); "
                  f"recorded in the audit log as {done.actor}", markup=False)
