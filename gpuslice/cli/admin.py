"""`gpuslice node ...`, `gpuslice admin ...` and `gpuslice token ...`."""

from __future__ import annotations

import secrets
from collections import defaultdict
from typing import Annotated

import typer

from gpuslice.cli.output import CliError, ago, console, friendly, mem, number, print_json, table
from gpuslice.client import Client
from gpuslice.common.resources import parse_cpu, parse_fgpu, parse_mem
from gpuslice.common.schemas.sessions import HOLDING

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

node_app = typer.Typer(help="Nodes and their GPUs (admins).", no_args_is_help=True)
admin_app = typer.Typer(help="Users, policies and join tokens (admins).", no_args_is_help=True)
user_app = typer.Typer(help="Users.", no_args_is_help=True)
policy_app = typer.Typer(help="Resource policies (quotas).", no_args_is_help=True)
join_app = typer.Typer(help="Join tokens that node agents register with.", no_args_is_help=True)
token_app = typer.Typer(help="Your API tokens.", no_args_is_help=True)
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(policy_app, name="policy")
admin_app.add_typer(join_app, name="token")


@node_app.command("list")
@friendly
def node_list(as_json: JsonOpt = False) -> None:
    """Nodes, their devices, and the slices each device has in use."""
    with Client.from_config() as client:
        nodes = client.list_nodes()
        holders = defaultdict(list)
        page = client.list_sessions(status=[s.value for s in HOLDING], limit=500)
        for s in page.items:
            for dev in s.placement.devices if s.placement else ():
                holders[dev.device_uuid].append(f"{s.name} {number(dev.gpu)}")
    if as_json:
        print_json([n.model_dump(mode="json") | {"slices": {
            d.uuid: holders.get(d.uuid, []) for d in n.devices}} for n in nodes])
        return
    rows = []
    for n in nodes:
        head = [n.name, n.status.value, n.pool, f"{number(n.cpu_used)}/{number(n.cpu)}",
                f"{mem(n.mem_used)}/{mem(n.mem)}", ago(n.last_heartbeat_at)]
        if not n.devices:
            rows.append(head + ["-", "", ""])
        for i, d in enumerate(n.devices):
            rows.append((head if i == 0 else [""] * len(head)) + [
                f"GPU {d.index} {d.model} ({mem(d.mem)})",
                f"{number(d.used)}/{number(d.capacity)}",
                ", ".join(holders.get(d.uuid, [])) or "-",
            ])
    table(["node", "status", "pool", "cpu", "mem", "heartbeat", "device", "fGPU used",
           "slices"], rows)


@user_app.command("create")
@friendly
def user_create(
    username: str,
    password: Annotated[str | None, typer.Option(help="Default: generated, printed.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make an admin.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a user."""
    generated = password is None
    password = password or secrets.token_urlsafe(12)
    with Client.from_config() as client:
        user = client.create_user(username, password, "admin" if admin else "user")
    if as_json:
        print_json(user.model_dump(mode="json") | ({"password": password} if generated else {}))
        return
    console.print(f"created {user.role.value} {user.username} ({user.id})", markup=False)
    if generated:
        console.print(f"password: {password}", markup=False)


@user_app.command("list")
@friendly
def user_list(as_json: JsonOpt = False) -> None:
    """All users."""
    with Client.from_config() as client:
        users = client.list_users()
        policies = {p.id: p.name for p in client.list_policies()}
    if as_json:
        print_json([
            u.model_dump(mode="json")
            | {"name": u.username, "status": "active" if u.is_active else "disabled"}
            for u in users
        ])
        return
    table(["id", "name", "role", "status", "policy", "created"],
          [(u.id, u.username, u.role.value, "active" if u.is_active else "disabled",
            policies.get(u.policy_id or "", "-"), ago(u.created_at)) for u in users])


@policy_app.command("set")
@friendly
def policy_set(
    username: str,
    max_gpu: Annotated[str | None, typer.Option(help="fGPU in total.")] = None,
    max_cpu: Annotated[str | None, typer.Option(help="CPU cores in total.")] = None,
    max_mem: Annotated[str | None, typer.Option(help="Memory in total, e.g. 64g.")] = None,
    max_sessions: Annotated[int | None, typer.Option(help="Sessions at once.")] = None,
    max_priority: Annotated[int, typer.Option(help="Highest priority allowed.")] = 0,
    max_private_images: Annotated[
        int | None, typer.Option(help="Private images (session commits) at once.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a user's quota (limits left out are unlimited)."""
    if max_gpu is not None:
        parse_fgpu(max_gpu, field="--max-gpu")
    if max_cpu is not None:
        parse_cpu(max_cpu, field="--max-cpu")
    if max_mem is not None:
        parse_mem(max_mem, field="--max-mem")
    if max_sessions is not None and max_sessions < 0:
        raise CliError("--max-sessions: must be zero or more", 2)
    if max_private_images is not None and max_private_images < 0:
        raise CliError("--max-private-images: must be zero or more", 2)
    limits = {"max_gpu": max_gpu, "max_cpu": max_cpu, "max_mem": max_mem,
              "max_sessions": max_sessions, "max_priority": max_priority,
              "max_private_images": max_private_images}
    with Client.from_config() as client:
        policy = client.set_user_policy(username, **limits)
    if as_json:
        print_json(policy)
        return
    console.print(
        f"{username}: at most {_limit(policy.max_sessions)} sessions, "
        f"{_limit(policy.max_gpu)} fGPU, {_limit(policy.max_cpu)} CPU, "
        f"{mem(policy.max_mem) if policy.max_mem is not None else 'unlimited'} memory, "
        f"{_limit(policy.max_private_images)} private images",
        markup=False,
    )


@policy_app.command("list")
@friendly
def policy_list(as_json: JsonOpt = False) -> None:
    """All policies."""
    with Client.from_config() as client:
        policies = client.list_policies()
    if as_json:
        print_json([p.model_dump(mode="json") | {"status": "active"} for p in policies])
        return
    table(["id", "name", "sessions", "fGPU", "cpu", "mem", "max priority"],
          [(p.id, p.name, _limit(p.max_sessions), _limit(p.max_gpu), _limit(p.max_cpu),
            mem(p.max_mem) if p.max_mem is not None else "unlimited", p.max_priority)
           for p in policies])


@join_app.command("create")
@friendly
def join_token_create(
    name: Annotated[str, typer.Option(help="What the token is for.")] = "agent",
    hours: Annotated[int, typer.Option(help="Valid for this many hours.")] = 24,
    as_json: JsonOpt = False,
) -> None:
    """A join token for `gpuslice agent serve` on a new node (shown once)."""
    with Client.from_config() as client:
        token = client.create_join_token(name, hours)
        url = client.url
    if as_json:
        print_json(token.model_dump(mode="json") | {"status": "active"})
        return
    console.print(f"join token (shown once, valid {hours}h): {token.token}", markup=False)
    console.print(f"on the node: GPUSLICE_AGENT_MANAGER_URL={url} "
                  f"GPUSLICE_AGENT_JOIN_TOKEN={token.token} gpuslice agent serve", markup=False)


@token_app.command("create")
@friendly
def token_create(name: str, days: Annotated[int | None, typer.Option()] = None,
                 as_json: JsonOpt = False) -> None:
    """An API token for scripts and the SDK (shown once)."""
    with Client.from_config() as client:
        token = client.create_token(name, days)
    if as_json:
        print_json(token.model_dump(mode="json") | {"status": "active"})
        return
    console.print(f"API token {token.name} (shown once): {token.token}", markup=False)


@token_app.command("list")
@friendly
def token_list(as_json: JsonOpt = False) -> None:
    """Your API tokens (never their secrets)."""
    with Client.from_config() as client:
        tokens = client.list_tokens()
    if as_json:
        print_json([t.model_dump(mode="json") | {"status": "active"} for t in tokens])
        return
    table(["id", "name", "created", "expires", "last used"],
          [(t.id, t.name, ago(t.created_at), t.expires_at or "never", ago(t.last_used_at))
           for t in tokens])


@token_app.command("revoke")
@friendly
def token_revoke(token_id: str) -> None:
    """Revoke one of your API tokens."""
    with Client.from_config() as client:
        client.revoke_token(token_id)
    console.print(f"revoked {token_id}", markup=False)


def _limit(value: object) -> str:
    return "unlimited" if value is None else number(value)
