"""`gpuslice auth status`: who this machine is logged in as, and until when."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer

from gpuslice.cli.output import CliError, JsonOpt, console, friendly, print_json
from gpuslice.client import Client

if TYPE_CHECKING:
    from gpuslice.common.schemas.users import TokenInfo

app = typer.Typer(help="Your login on this machine.", no_args_is_help=True)


@app.command("status")
@friendly
def status(as_json: JsonOpt = False) -> None:
    """The manager's URL, who you are, your token's kind and when it ends (unused, and at the
    latest; a single sign-on user's API and CLI tokens also when not signed in again by then).
    A token that has ended is an error that says to log in again."""
    from gpuslice.client import load_config
    from gpuslice.client.config import config_path

    config = load_config()
    if not config.url or not config.token:
        raise CliError("you are not logged in: run `gpuslice login URL`")
    source = "GPUSLICE_TOKEN" if os.environ.get("GPUSLICE_TOKEN") else str(config_path())
    with Client(config.url, config.token) as client:
        me, info = client.me(), client.token_info()
    if as_json:
        standing = me.standing_until.isoformat() if me.standing_until else None
        print_json({"url": config.url, "username": me.username, "role": me.role.value,
                    "token_from": source, "token": info.model_dump(mode="json"),
                    "standing_until": standing})
        return
    lines = [("URL", config.url), ("user", f"{me.username} ({me.role.value})"),
             ("token", f"{info.kind} token {info.name!r} (from {source}), made "
                       f"{_at(info.created_at)}"),
             ("expires", _expiry(info))]
    if me.standing_until is not None and info.kind in ("api", "cli"):
        lines.append(("sso", f"sign in with single sign-on again by "
                             f"{_at(me.standing_until)} to keep this token working"))
    for label, text in lines:
        console.print(f"{label + ':':<9}{text}", markup=False)


def _expiry(info: TokenInfo) -> str:
    if info.expires_at is None and info.idle_expires_at is None:
        return "never (until revoked)"
    parts = []
    if info.idle_seconds is not None and info.idle_expires_at is not None:
        parts.append(f"after {_span(info.idle_seconds)} unused: {_at(info.idle_expires_at)} "
                     "unless used before")
    if info.expires_at is not None:
        parts.append(f"at the latest {_at(info.expires_at)}")
    return "; ".join(parts)


def _at(when: datetime) -> str:
    """A UTC time, and how far away it is."""
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    seconds = (when - datetime.now(UTC)).total_seconds()
    away = f"in {_span(seconds)}" if seconds >= 0 else f"{_span(-seconds)} ago"
    return f"{when:%Y-%m-%d %H:%M} UTC ({away})"


def _span(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} seconds"
