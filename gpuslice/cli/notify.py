"""`gpuslice notify ...`: where your sessions' events are sent (webhook, Slack, e-mail)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuslice.cli.output import CliError, JsonOpt, ago, console, friendly, print_json, table
from gpuslice.client import Client
from gpuslice.common.durations import parse_duration

app = typer.Typer(
    help="Notifications of your sessions' events: webhooks (signed JSON), Slack-compatible "
    "webhooks, e-mail (set by admins). See docs/user-guide.md, \"Notifications\".",
    no_args_is_help=True)
EVENTS_HELP = ("Comma-separated events: started, finished, failed, preempted, cancelled, "
               "time_limit_warning, idle_warning, pending_long (default: all but pending_long).")


@app.command("add")
@friendly
def notify_add(
    webhook: Annotated[str | None, typer.Option(help="A webhook URL (https).")] = None,
    slack: Annotated[str | None, typer.Option(
        help="A Slack-compatible incoming webhook URL (Slack, Mattermost, Rocket.Chat).")] = None,
    email: Annotated[str | None, typer.Option(
        help="An e-mail address (admins; with --user or --project).")] = None,
    events: Annotated[str | None, typer.Option(help=EVENTS_HELP)] = None,
    project: Annotated[str | None, typer.Option(
        help="A project's channel: every session of the project (admins).")] = None,
    user: Annotated[str | None, typer.Option(
        help="Admins: add it for this user (e.g. their e-mail).")] = None,
    pending_after: Annotated[str | None, typer.Option(
        help="pending_long after this long PENDING, e.g. 30m (default 30m).")] = None,
    name: Annotated[str, typer.Option(help="A name to tell it by.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Add a channel. A webhook's signing secret is printed this once: keep it to check the
    `webhook-signature` header. Private and loopback URLs are refused unless an admin allowed
    them (notify.allowed_targets)."""
    given = [(k, v) for k, v in (("webhook", webhook), ("slack", slack), ("email", email)) if v]
    if len(given) != 1:
        raise CliError("give one of --webhook URL, --slack URL or --email ADDRESS", 2)
    kind, target = given[0]
    options: dict[str, object] = {"name": name, "project": project, "user": user}
    if events:
        options["events"] = [e.strip() for e in events.split(",") if e.strip()]
    if pending_after:
        options["pending_after"] = parse_duration(pending_after, field="pending-after",
                                                  minimum=1)
    with Client.from_config() as client:
        channel = client.add_channel(kind, target, **options)
    if as_json:
        print_json(channel.model_dump(mode="json"))
        return
    console.print(f"added {channel.kind} channel {channel.id} ({channel.target})", markup=False)
    if channel.secret:
        console.print(f"signing secret (shown once): {channel.secret}", markup=False)


@app.command("list")
@friendly
def notify_list(as_json: JsonOpt = False) -> None:
    """Your channels (admins: also every project's); never their secrets."""
    with Client.from_config() as client:
        channels = client.list_channels()
    if as_json:
        print_json([c.model_dump(mode="json") for c in channels])
        return
    table(["id", "kind", "name", "for", "target", "events", "state"],
          [(c.id, c.kind, c.name, c.owner or f"project {c.project}", c.target,
            ",".join(e.removeprefix("session.") for e in c.events),
            "enabled" if c.enabled else f"disabled: {c.disabled_reason}") for c in channels])


@app.command("test")
@friendly
def notify_test(channel_id: str, as_json: JsonOpt = False) -> None:
    """Send a test notification now; prints the receiver's HTTP status or the SMTP reply."""
    with Client.from_config() as client:
        result = client.test_channel(channel_id)
    if as_json:
        print_json(result.model_dump(mode="json"))
    elif result.ok:
        console.print(f"delivered: {result.status}", markup=False)
    if not result.ok:
        raise CliError(f"not delivered: {result.status}: {result.error}")


@app.command("enable")
@friendly
def notify_enable(channel_id: str) -> None:
    """Enable a channel again (after a 410 or too many failures disabled it)."""
    with Client.from_config() as client:
        client.update_channel(channel_id, enabled=True)
    console.print(f"enabled {channel_id}", markup=False)


@app.command("remove")
@friendly
def notify_remove(channel_id: str) -> None:
    """Remove a channel; its deliveries not yet sent go with it."""
    with Client.from_config() as client:
        client.remove_channel(channel_id)
    console.print(f"removed {channel_id}", markup=False)


@app.command("log")
@friendly
def notify_log(
    channel: Annotated[str | None, typer.Option(help="One channel's deliveries.")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only those that failed.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Your channels' deliveries, newest first: attempts, the receiver's answer, next try."""
    with Client.from_config() as client:
        rows = client.list_deliveries(channel, failed=failed, limit=limit)
    _deliveries(rows, as_json)


@app.command("failures")
@friendly
def notify_failures(limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
                    as_json: JsonOpt = False) -> None:
    """Every user's and project's failed deliveries: given up, or being retried (admins)."""
    with Client.from_config() as client:
        rows = client.list_failures(limit)
    _deliveries(rows, as_json, owners=True)


def _deliveries(rows: list, as_json: bool, owners: bool = False) -> None:  # type: ignore[type-arg]
    if as_json:
        print_json([r.model_dump(mode="json") for r in rows])
        return
    columns = ["time", "event", "session", "channel", "status", "attempt", "answer", "error",
               "next"]
    if owners:
        columns.insert(3, "owner")
    out = []
    for r in rows:
        line = [ago(r.created_at), r.event.removeprefix("session."), r.session or "-",
                f"{r.channel} ({r.channel_id[:8]})", r.status, str(r.attempts),
                r.last_status or "-", r.last_error or "-",
                ago(r.next_attempt_at) if r.next_attempt_at else "-"]
        if owners:
            line.insert(3, r.owner or "project")
        out.append(line)
    table(columns, out)
