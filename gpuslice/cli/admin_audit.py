"""`gpuslice admin audit ...`: read the audit log and check its hash chain (admins); and
`gpuslice activity`, everyone's own security log."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from gpuslice.cli._syslog import Syslog
from gpuslice.cli.output import CliError, JsonOpt, console, friendly, print_json, table
from gpuslice.client import Client
from gpuslice.common.durations import parse_duration
from gpuslice.common.resources import ResourceError

if TYPE_CHECKING:
    from gpuslice.common.schemas.audit import AuditPage

app = typer.Typer(help="The audit log: who did what, when, from where (admins).")

SinceOpt = Annotated[str | None, typer.Option(
    "--since", help="From this long ago (24h, 7d) or this time (2026-12-01T00:00:00Z).")]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=500, help="Rows to show.")]


@app.callback(invoke_without_command=True)
@friendly
def audit(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option(
        "--user", help="Who acted: a username (a failed login: the name tried).")] = None,
    action: Annotated[str | None, typer.Option(
        "--action", help="An action (session.create) or a prefix with * ('auth.*').")] = None,
    target: Annotated[str | None, typer.Option(
        "--target", help="What it acted on: TYPE:ID (session:ID, user:ID) or an id.")] = None,
    outcome: Annotated[str | None, typer.Option(
        "--outcome", help="success, failure or denied.")] = None,
    since: SinceOpt = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Before this long ago (1h) or this time.")] = None,
    limit: LimitOpt = 100,
    as_json: JsonOpt = False,
) -> None:
    """The audit log, newest first, filtered."""
    if ctx.invoked_subcommand is not None:
        return
    with Client.from_config() as client:
        page = client.audit(user=user, action=action, target=target, outcome=outcome,
                            since=_time(since, "--since"), until=_time(until, "--until"),
                            limit=limit)
    show(page, as_json)


@app.command("verify")
@friendly
def verify(as_json: JsonOpt = False) -> None:
    """Check the hash chain: exit 0 when every sealed row is as it was written, 2 (naming
    the first position that is not) when a row was changed, deleted or inserted."""
    with Client.from_config() as client:
        verdict = client.audit_verify()
    if as_json:
        print_json(verdict)
    elif verdict.intact:
        console.print(f"intact: {verdict.sealed_through} rows sealed "
                      f"(head {verdict.head_hash[:16]}…), {verdict.unsealed} not sealed yet")
    else:
        console.print(f"BROKEN at position {verdict.first_break}: {verdict.problem}")
    if not verdict.intact:
        raise typer.Exit(2)


@app.command("export")
@friendly
def export(
    file: Annotated[Path | None, typer.Argument(
        help="Write JSON lines here (mode 0600); - for standard output.")] = None,
    syslog: Annotated[str | None, typer.Option(
        "--syslog", help="Send each row to this syslog receiver instead: udp://HOST:PORT or "
        "tcp://HOST:PORT (RFC 5424, facility authpriv).")] = None,
    since: SinceOpt = None,
) -> None:
    """Export the audit log, oldest first, one JSON object per row (its seal included), to a
    file or to syslog. Itself audited (audit.export)."""
    if (file is None) == (syslog is None):
        raise CliError("give a FILE (or -) or --syslog URL, one of the two", 2)
    sink = Syslog(syslog) if syslog else None
    count = 0
    with Client.from_config() as client, _output(file) as out:
        for line in client.audit_export(since=_time(since, "--since")):
            if not line:
                continue
            if sink is not None:
                sink.send(line)
            else:
                out.write(line + "\n")
            count += 1
    if sink is not None:
        sink.close()
    if file != Path("-"):
        console.print(f"exported {count} audit rows to {syslog or file}")


@friendly
def activity(since: SinceOpt = None, limit: LimitOpt = 100, as_json: JsonOpt = False) -> None:
    """Your own security log: logins, failed logins on your name, tokens, password changes.

    Each line says when, from which address and by which method, and includes tokens made
    and revoked and what admins did to your account."""
    with Client.from_config() as client:
        page = client.activity(since=_time(since, "--since"), limit=limit)
    show(page, as_json)


def show(page: AuditPage, as_json: bool) -> None:
    if as_json:
        print_json(page.items)
        return
    table(["TIME", "ACTOR", "ACTION", "OUTCOME", "TARGET", "FROM", "REQUEST"], [
        (e.at.strftime("%Y-%m-%d %H:%M:%S"), e.actor_name or e.actor_id or e.actor_type,
         e.action, e.outcome + (f" ({e.reason})" if e.reason else ""),
         f"{e.target_type}:{e.target_id}" if e.target_id else "-", e.source_ip or "-",
         e.request_id or "-")
        for e in page.items])


@contextmanager
def _output(file: Path | None) -> Iterator[TextIO]:
    if file is None or file == Path("-"):
        yield sys.stdout
        return
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yield out


def _time(value: str | None, option: str) -> str | None:
    """An RFC 3339 time from ``24h`` (that long ago) or from a time as given."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value, field=option)
    except ResourceError:
        pass
    else:
        return (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"{option}: {value!r} is neither a duration (24h, 7d) nor a time "
                       "(2026-12-01T00:00:00Z)", 2) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()
