"""`gpuslice admin ...`: users, their quotas, the join tokens of node agents, the platform's
configuration as JSON, backups of its database, the audit log (admins)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli import (
    admin_audit,
    admin_backup,
    admin_config,
    admin_identity,
    admin_ldap,
    admin_preset,
    admin_priority,
    admin_project,
    admin_recover,
)
from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    ago,
    console,
    friendly,
    mem,
    number,
    print_json,
    table,
)
from gpuslice.client import Client
from gpuslice.common.durations import format_duration, parse_duration
from gpuslice.common.resources import parse_cpu, parse_fgpu, parse_mem

if TYPE_CHECKING:
    from gpuslice.common.schemas.nodes import JoinTokenCreated
    from gpuslice.common.schemas.users import PolicyPublic, UserPublic

app = typer.Typer(help="Users, policies, projects, join tokens, configuration, backups, "
                  "the audit log (admins).",
                  no_args_is_help=True)
user_app = typer.Typer(help="Users.", no_args_is_help=True)
policy_app = typer.Typer(help="Resource policies (quotas).", no_args_is_help=True)
join_app = typer.Typer(help="Join tokens that node agents register with.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(policy_app, name="policy")
app.add_typer(join_app, name="token")
app.add_typer(admin_config.app, name="config")
app.add_typer(admin_preset.app, name="preset")
app.add_typer(admin_project.app, name="project")
app.add_typer(admin_priority.app, name="priority-class")
app.add_typer(admin_audit.app, name="audit")
app.add_typer(admin_ldap.app, name="ldap")
app.command("backup")(admin_backup.backup)
app.command("restore")(admin_backup.restore)
app.command("recover")(admin_recover.recover)
user_app.command("show")(admin_identity.show)
user_app.command("link")(admin_identity.link)
user_app.command("unlink")(admin_identity.unlink)


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


@user_app.command("password")
@friendly
def user_password(
    username: str,
    password: Annotated[str | None, typer.Option(help="Default: generated, printed.")] = None,
    keep_api_tokens: Annotated[bool, typer.Option(
        "--keep-api-tokens", help="Keep the user's API tokens working.")] = False,
) -> None:
    """Reset a user's password: their logins end (API tokens too, unless kept)."""
    generated = password is None
    password = password or secrets.token_urlsafe(12)
    with Client.from_config() as client:
        user = client.reset_password(username, password, keep_api_tokens=keep_api_tokens)
    ended = "logins" if keep_api_tokens else "logins and API tokens"
    console.print(f"new password for {user.username}; their {ended} ended", markup=False)
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
    table(["id", "name", "role", "status", "source", "policy", "created"],
          [(u.id, u.username, u.role.value, _status(u), u.source,
            policies.get(u.policy_id or "", "-"), ago(u.created_at)) for u in users])


def _status(user: UserPublic) -> str:
    if user.is_active:
        return "active"
    return f"disabled ({user.disabled_reason})" if user.disabled_reason else "disabled"


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
    max_storage: Annotated[
        str | None, typer.Option(help="What one's storage folders may hold, e.g. 100g.")
    ] = None,
    idle_window: Annotated[str | None, typer.Option(
        help="Reclaim sessions idle this long, e.g. 30m (enables the idle rule).")] = None,
    idle_grace: Annotated[str | None, typer.Option(
        help="Idle rule: not before this long after a session starts, e.g. 10m.")] = None,
    idle_gpu_below: Annotated[int | None, typer.Option(
        help="Idle rule: GPU utilization of its processes below this percent.")] = None,
    idle_cpu_below: Annotated[int | None, typer.Option(
        help="Idle rule: CPU below this percent of its allocation.")] = None,
    idle_activity: Annotated[bool, typer.Option(
        "--idle-activity", help="Idle rule: no terminal or app activity (interactive).")] = False,
    idle_combine: Annotated[str, typer.Option(
        help="Idle rule: all (every criterion idle) or any (one is enough).")] = "all",
    max_lifetime: Annotated[str | None, typer.Option(
        help="Reclaim sessions running longer than this, e.g. 8h or 7d.")] = None,
    max_pending: Annotated[
        int | None, typer.Option(help="PENDING sessions waiting at once (default: the "
                                      "manager's sessions.max_pending).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a user's quota and reclaim rules (limits left out are unlimited)."""
    if max_gpu is not None:
        parse_fgpu(max_gpu, field="--max-gpu")
    if max_cpu is not None:
        parse_cpu(max_cpu, field="--max-cpu")
    if max_mem is not None:
        parse_mem(max_mem, field="--max-mem")
    if max_storage is not None:
        parse_mem(max_storage, field="--max-storage")
    if max_sessions is not None and max_sessions < 0:
        raise CliError("--max-sessions: must be zero or more", 2)
    if max_private_images is not None and max_private_images < 0:
        raise CliError("--max-private-images: must be zero or more", 2)
    idle = _idle_rule(idle_window, idle_grace, idle_gpu_below, idle_cpu_below, idle_activity,
                      idle_combine)
    if max_pending is not None and max_pending < 0:
        raise CliError("--max-pending: must be zero or more", 2)
    limits = {"max_gpu": max_gpu, "max_cpu": max_cpu, "max_mem": max_mem,
              "max_sessions": max_sessions, "max_priority": max_priority,
              "max_private_images": max_private_images, "max_storage": max_storage,
              "max_pending": max_pending, "idle": idle,
              "max_lifetime": None if max_lifetime is None
              else parse_duration(max_lifetime, field="--max-lifetime", minimum=1)}
    with Client.from_config() as client:
        policy = client.set_user_policy(username, **limits)
    if as_json:
        print_json(policy)
        return
    console.print(
        f"{username}: at most {_limit(policy.max_sessions)} sessions, "
        f"{_limit(policy.max_gpu)} fGPU, {_limit(policy.max_cpu)} CPU, "
        f"{mem(policy.max_mem) if policy.max_mem is not None else 'unlimited'} memory, "
        f"{_limit(policy.max_private_images)} private images, "
        f"{mem(policy.max_storage) if policy.max_storage is not None else 'unlimited'} "
        f"of storage; {_reclaim_rules(policy)}",
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
    table(["id", "name", "sessions", "fGPU", "cpu", "mem", "max priority", "reclaim"],
          [(p.id, p.name, _limit(p.max_sessions), _limit(p.max_gpu), _limit(p.max_cpu),
            mem(p.max_mem) if p.max_mem is not None else "unlimited", p.max_priority,
            _reclaim_rules(p)) for p in policies])


@join_app.command("create")
@friendly
def join_token_create(
    name: Annotated[str, typer.Option(help="What the token is for.")] = "agent",
    hours: Annotated[int, typer.Option(help="Valid for this many hours.")] = 1,
    node: Annotated[str | None, typer.Option(help="Only a node of this name may use it.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A single-use join token for `gpuslice agent serve` on a new node (shown once)."""
    with Client.from_config() as client:
        token = client.create_join_token(name, hours, node=node)
        url = client.url
    print_join_token(token, url, hours, as_json)


def print_join_token(token: JoinTokenCreated, url: str, hours: int, as_json: bool) -> None:
    """The token and the command that uses it (`admin token create`, `node rekey`)."""
    if as_json:
        print_json(token.model_dump(mode="json"))
        return
    what = f"node {token.node}" if token.node else "one node"
    console.print(f"join token for {what} (shown once, single use, valid {hours}h): "
                  f"{token.token}", markup=False)
    name = f"GPUSLICE_AGENT_NODE_NAME={token.node} " if token.node else ""
    console.print(f"on the node: GPUSLICE_AGENT_MANAGER_URL={url} {name}"
                  f"GPUSLICE_AGENT_JOIN_TOKEN={token.token} gpuslice agent serve", markup=False)


def _limit(value: object) -> str:
    return "unlimited" if value is None else number(value)


def _idle_rule(window: str | None, grace: str | None, gpu_below: int | None,
               cpu_below: int | None, activity: bool, combine: str) -> dict[str, object] | None:
    if window is None:
        if grace is not None or gpu_below is not None or cpu_below is not None or activity:
            raise CliError("--idle-window: the idle options need a window, e.g. "
                           "--idle-window 30m", 2)
        return None
    if combine not in ("all", "any"):
        raise CliError(f"--idle-combine: all or any, not {combine!r}", 2)
    for value, name in ((gpu_below, "--idle-gpu-below"), (cpu_below, "--idle-cpu-below")):
        if value is not None and not 1 <= value <= 100:
            raise CliError(f"{name}: a percent from 1 to 100, got {value}", 2)
    if gpu_below is None and cpu_below is None and not activity:
        raise CliError("--idle-window: give at least one of --idle-gpu-below, "
                       "--idle-cpu-below, --idle-activity", 2)
    return {"window": parse_duration(window, field="--idle-window", minimum=1),
            "grace": 0 if grace is None else parse_duration(grace, field="--idle-grace"),
            "gpu_util": gpu_below, "cpu_util": cpu_below, "activity": activity,
            "combine": combine}


def _reclaim_rules(policy: PolicyPublic) -> str:
    """``idle 30 min (GPU < 1 % and no activity), at most 8 h`` or ``never reclaimed``."""
    parts = []
    if policy.idle is not None:
        rule = policy.idle
        says = [f"GPU < {rule.gpu_util} %" if rule.gpu_util else "",
                f"CPU < {rule.cpu_util} %" if rule.cpu_util else "",
                "no activity" if rule.activity else ""]
        joined = (" and " if rule.combine == "all" else " or ").join(x for x in says if x)
        grace = f", {format_duration(rule.grace)} grace" if rule.grace else ""
        parts.append(f"idle {format_duration(rule.window)} ({joined}{grace})")
    if policy.max_lifetime is not None:
        parts.append(f"at most {format_duration(policy.max_lifetime)}")
    return ", ".join(parts) or "never reclaimed"
