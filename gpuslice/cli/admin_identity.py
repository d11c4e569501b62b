"""`gpuslice admin user show | link | unlink`: a user's source and identities at providers."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuslice.cli.output import JsonOpt, ago, console, friendly, print_json, table
from gpuslice.client import Client

ProviderOpt = Annotated[str, typer.Option(
    "--provider", help="oidc (single sign-on) or ldap (the directory).")]


@friendly
def show(username: str, as_json: JsonOpt = False) -> None:
    """A user: role, status, where they sign in, their identities at providers."""
    with Client.from_config() as client:
        user = client.find_user(username)
        identities = client.identities(username)
    if as_json:
        print_json(user.model_dump(mode="json")
                   | {"identities": [i.model_dump(mode="json") for i in identities]})
        return
    status = "active" if user.is_active else f"disabled ({user.disabled_reason or 'admin'})"
    source = {"local": "a password here", "oidc": "single sign-on",
              "ldap": "the directory"}.get(user.source, user.source)
    console.print(f"{user.username} ({user.id}): {user.role.value}, {status}; signs in with "
                  f"{source}", markup=False)
    if not identities:
        console.print("no identity at a provider: signs in with a password", markup=False)
        return
    table(["provider", "subject", "name there", "groups", "last sign-in"],
          [(i.provider, i.subject, i.claimed_username,
            "-" if i.groups is None else ", ".join(i.groups) or "(none)",
            ago(i.last_login_at) if i.last_login_at else "never") for i in identities])


@friendly
def link(
    username: str,
    provider: ProviderOpt,
    subject: Annotated[str, typer.Option(
        help="The provider's id of the user: OIDC sub, directory entryUUID/objectGUID "
        "(the refusal a person saw names it).")],
) -> None:
    """Link an account to a provider's user: their next sign-in there is this account."""
    with Client.from_config() as client:
        client.link_identity(username, provider, subject)
    console.print(f"{username} is linked to {provider} user {subject}", markup=False)


@friendly
def unlink(username: str, provider: ProviderOpt) -> None:
    """Unlink an account from its user at a provider."""
    with Client.from_config() as client:
        gone = client.unlink_identity(username, provider)
    console.print(f"{username} is no longer linked to {provider} user {gone.subject}",
                  markup=False)
