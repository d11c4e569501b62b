"""`gpuslice token ...`: your own API tokens, for scripts and the SDK."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuslice.cli.output import JsonOpt, ago, console, friendly, print_json, table
from gpuslice.client import Client

app = typer.Typer(help="Your API tokens.", no_args_is_help=True)


@app.command("create")
@friendly
def token_create(name: str, days: Annotated[int | None, typer.Option()] = None,
                 as_json: JsonOpt = False) -> None:
    """An API token for scripts and the SDK (shown once). --days N: it expires after N days
    (default: never; a single sign-on user's lasts at most auth.oidc.api_token_max_days, 365,
    and only while they keep signing in: see docs/operations.md)."""
    with Client.from_config() as client:
        token = client.create_token(name, days)
    if as_json:
        print_json(token.model_dump(mode="json") | {"status": "active"})
        return
    console.print(f"API token {token.name} (shown once): {token.token}", markup=False)
    if token.expires_at is not None:
        console.print(f"it expires {token.expires_at:%Y-%m-%d %H:%M} UTC", markup=False)


@app.command("list")
@friendly
def token_list(as_json: JsonOpt = False) -> None:
    """Your API tokens and CLI logins (kind cli, one per machine; never their secrets)."""
    with Client.from_config() as client:
        tokens = client.list_tokens()
    if as_json:
        print_json([t.model_dump(mode="json") for t in tokens])
        return
    table(["id", "kind", "name", "status", "created", "expires", "last used"],
          [(t.id, t.kind, t.name, t.status, ago(t.created_at), t.expires_at or "never",
            ago(t.last_used_at)) for t in tokens])


@app.command("revoke")
@friendly
def token_revoke(token_id: str) -> None:
    """Revoke one of your API tokens, or the CLI login of another machine."""
    with Client.from_config() as client:
        client.revoke_token(token_id)
    console.print(f"revoked {token_id}", markup=False)
