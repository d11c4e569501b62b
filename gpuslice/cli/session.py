"""`gpuslice session ...`: create, list, show, stats, logs, destroy, exec, shell, ssh,
port-forward, commit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli import timing, waits
from gpuslice.cli.output import (
    GPU_MEM_HELP,
    PRIORITY_HELP,
    SESSION_REF,
    SESSION_REFS,
    CliError,
    GroupOpt,
    JsonOpt,
    ProjectOpt,
    ago,
    console,
    friendly,
    gpu_mem_option,
    invalid_option,
    mem,
    number,
    print_json,
    priority_option,
    session_client,
    table,
)
from gpuslice.client import ApiError, Client, schemas
from gpuslice.common import limits
from gpuslice.common.durations import format_duration
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.resources import format_mem

if TYPE_CHECKING:
    from gpuslice.client.terminal import Terminal
    from gpuslice.common.schemas.sessions import ReclaimPublic, SessionCreate, SessionPublic

app = typer.Typer(
    help="Compute sessions: create, list, show, stats, logs, destroy, exec, shell, ssh, "
    "port-forward.",
    no_args_is_help=True)


def _client() -> Client:
    return session_client()


@app.command("create", epilog=waits.CREATE_CODES)
@friendly
def create(
    image: Annotated[str, typer.Option(help="Image to run.")] = DEFAULT_SESSION_IMAGE,
    gpu: Annotated[str, typer.Option(help="fGPU, e.g. 0.5 or 2 (0: no GPU).")]
    = limits.DEFAULT_GPU,
    gpu_mem: Annotated[str | None, typer.Option("--gpu-mem", help=GPU_MEM_HELP)] = None,
    cpu: Annotated[str, typer.Option(help="CPU cores, e.g. 0.5 or 4.")] = limits.DEFAULT_CPU,
    mem_: Annotated[str, typer.Option(
        "--mem", help=f"Memory, e.g. 512m or 2g (at least {format_mem(limits.MIN_MEM)}).")]
    = limits.DEFAULT_MEM,
    count: Annotated[int, typer.Option(
        help=f"How many identical sessions (1-{limits.CREATE_COUNT_MAX}).")] = 1,
    name: Annotated[str | None, typer.Option(help="Session name.")] = None,
    type_: Annotated[str, typer.Option("--type", help="interactive or batch.")]
    = limits.DEFAULT_TYPE,
    command: Annotated[str | None, typer.Option(help="Batch: the command to run.")] = None,
    env: Annotated[list[str] | None, typer.Option(help="K=V, repeatable.")] = None,
    priority: Annotated[str | None, typer.Option(help=PRIORITY_HELP)] = None,
    gpu_model: Annotated[str | None, typer.Option(help="Only GPUs of this model.")] = None,
    app_: Annotated[list[str] | None, typer.Option(
        "--app", help="An app of the image to start with the session, e.g. jupyter "
        "(repeatable; others start when first opened).")] = None,
    folder: Annotated[list[str] | None, typer.Option(
        help="Mount a storage folder at /home/work/NAME: NAME or NAME:ro (repeat).")] = None,
    project: ProjectOpt = None,
    group: GroupOpt = None,
    wait: Annotated[bool, typer.Option(
        help="Wait until every session runs, or waits PENDING with the scheduler's reason "
        "(both succeed); one that ends in ERROR or CANCELLED instead fails.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 300,
    time: Annotated[str | None, typer.Option("--time", help=timing.TIME_HELP)] = None,
    begin: Annotated[str | None, typer.Option(help=timing.BEGIN_HELP)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Launch sessions; they start PENDING and run as soon as the scheduler places them."""
    if type_ == "batch" and not command:
        raise CliError("--command: a batch session needs a command to run", 2)
    request = _request(
        image=image, gpu=gpu, cpu=cpu, mem=mem_, count=count, name=name, type=type_,
        command_line=command, env=dict(_env_pair(item) for item in env or []),
        **priority_option(priority), gpu_model=gpu_model, apps=app_ or [],
        gpu_mem=gpu_mem_option(gpu_mem), folders=folder or [], project=project, group=group,
        time_limit=timing.time_option(time), begin_at=timing.begin_option(begin),
    )
    with _client() as client:
        try:
            created = client.create_sessions(request)
        except ApiError as err:
            if err.code != "no_answer":
                raise
            # The request was sent; its one transaction either committed or not.
            raise CliError(f"{err.message}: see `gpuslice session list` before asking again "
                           "(the sessions exist if it lists them, all or none)") from None
        outcome = waits.Outcome()
        if wait:
            try:
                created, outcome = waits.started(client, created, timeout)
            except KeyboardInterrupt:
                names = ", ".join(s.name for s in created)
                raise CliError(f"stopped waiting; {names} go on without you (see `gpuslice "
                               "session list`)", 130) from None
    if as_json:
        print_json(created)
    else:
        _session_table(created)
    outcome.exit()


@app.command("list")
@friendly
def list_(
    all_users: Annotated[bool, typer.Option("--all", help="Every user's (admins).")] = False,
    status: Annotated[list[str] | None, typer.Option(help="Only this status (repeat).")] = None,
    limit: Annotated[int, typer.Option(help=f"At most this many (1-{limits.PAGE_MAX}).")]
    = limits.PAGE_DEFAULT,
    offset: Annotated[int, typer.Option(help="Skip this many (the newest) first.")] = 0,
    all_pages: Annotated[bool, typer.Option(
        "--all-pages", help="Every matching session, fetched page after page.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Your sessions, newest first. JSON: {"items", "total", "limit", "offset", "next"}; the
    listing is complete when "total" equals the number of items (else page with --offset, or
    --all-pages)."""
    if not 1 <= limit <= limits.PAGE_MAX:
        raise CliError(f"--limit: must be between 1 and {limits.PAGE_MAX}, got {limit}", 2)
    if offset < 0:
        raise CliError(f"--offset: must be 0 or more, got {offset}", 2)
    statuses = [_status(s) for s in status or []]
    with _client() as client:
        me = client.get_json("/auth/me")  # two fields: not worth building the user models
        # users only ever see their own; admins see everyone's and narrow to their own here
        owner = me["username"] if me["role"] == "admin" and not all_users else None
        query: dict[str, Any] = {"status": statuses} | ({"owner": owner} if owner else {})
        # The manager's answer as it came: it dumped the sessions with the very schema the
        # models would be dumped with, so the JSON is the same, without building the pydantic
        # models (a good part of this command's time, paid by scripts every call).
        page: dict[str, Any]
        if all_pages:
            items = client.get_all_json("/sessions", query)
            page = {"items": items, "total": len(items), "limit": len(items), "offset": 0,
                    "next": None}
        else:
            page = client.get_json("/sessions", query | {"limit": limit, "offset": offset})
    if as_json:
        print_json(page)
        return
    sessions = [schemas.sessions.SessionPublic.model_validate(s) for s in page["items"]]
    _session_table(sessions, owner_column=all_users)
    if page["total"] > len(sessions):
        console.print(f"({len(sessions)} of {page['total']}; use --limit, --offset or "
                      "--all-pages for more)")


@app.command("show")
@friendly
def show(ref: Annotated[str, typer.Argument(help=SESSION_REF)],
         as_json: JsonOpt = False) -> None:
    """Status, why it waits and its queue position, allocation, and history."""
    with _client() as client:
        session = client.get_session(ref)
    if as_json:
        print_json(session)
        return
    res = session.resources
    lines = [
        ("id", session.id), ("name", session.name), ("owner", session.owner),
        ("image", session.image), ("type", session.type.value),
        ("status", session.status.value),
    ]
    if session.status_reason:
        lines.append(("reason", session.status_reason))
    if session.queue_position is not None:
        lines.append(("queue position", str(session.queue_position)))
    if session.result is not None:
        lines.append(("result", f"{session.result.value} (exit code {session.exit_code})"))
    lines.append(("resources",
                  f"{number(res.gpu)} fGPU, {number(res.cpu)} CPU, {mem(res.mem)} memory"
                  + (f" (asked: {mem(res.gpu_mem)} of GPU memory)" if res.gpu_mem else "")))
    for folder in session.folders:
        lines.append((f"/home/work/{folder.name}",
                      "folder (read-only)" if folder.read_only else "folder"))
    if session.placement:
        lines.append(("node", session.placement.node_name))
        for dev in session.placement.devices:
            lines.append((
                f"GPU {dev.device_index}",
                f"{number(dev.gpu)} fGPU ({number(dev.fraction * 100)}% of {dev.device_model} "
                f"{dev.device_uuid}), {mem(dev.mem)} GPU memory, {dev.sms} SMs",
            ))
    lines += timing.time_lines(session)
    if session.reclaim is not None:
        lines.append(("reclaim", _reclaim(session.reclaim)))
    _print_pairs(lines)
    if session.history:
        console.print()
        table(["when", "status", "reason"],
              [(ago(h.at), h.status.value, h.reason) for h in session.history])


@app.command("stats")
@friendly
def stats(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    since: Annotated[str | None, typer.Option(
        help="From this long ago (30m, 6h, 7d) or an ISO time; default: its whole life.")] = None,
    step: Annotated[int | None, typer.Option(help="Seconds per line (a multiple of 60).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Usage now and over time: GPU memory and utilization of its own processes, CPU, memory.

    Works after the session ended (history is kept by the manager)."""
    with _client() as client:
        found = client.session_stats(ref, since=since, step=step)
    if as_json:
        print_json(found)
        return
    now, totals = found.now, found.totals
    lines = [("session", f"{found.name} ({found.session_id}), {found.status.value}, "
                         f"owner {found.owner}")]
    if now is None:
        lines.append(("now", "not measured yet"))
    else:
        cpu = "-" if now.cpu is None else number(now.cpu)
        lines.append(("now", f"{cpu} CPU, {mem(now.mem)} memory ({ago(now.at)})"))
        for gpu in now.gpus or []:
            util = "n/a" if gpu.utilization is None else f"{gpu.utilization} %"
            lines.append((f"  {gpu.uuid}", f"{mem(gpu.mem_used)} GPU memory, {util} busy"))
        if now.gpus is None:
            lines.append(("  GPU", "not measured on its node"))
    lines.append(("totals", f"{number(totals.fgpu_hours)} fGPU-hours, "
                            f"{number(totals.cpu_hours)} CPU-hours, "
                            f"{number(totals.gpu_mem_gib_hours)} GPU-memory GiB-hours over "
                            f"{number(round(totals.seconds / 3600, 2))} h measured"))
    if found.reclaim is not None:
        lines.append(("reclaim", _reclaim(found.reclaim)))
    _print_pairs(lines)
    console.print()
    table(["from (UTC)", "fGPU", "GPU mem", "GPU peak", "GPU util", "CPU", "memory", "peak"],
          [(p.at.strftime("%m-%d %H:%M"), number(p.fgpu), mem(p.gpu_mem), mem(p.gpu_mem_peak),
            "n/a" if p.gpu_util is None else f"{number(p.gpu_util)} %",
            "n/a" if p.cpu is None else number(p.cpu), mem(p.mem), mem(p.mem_peak))
           for p in found.points],
          title=f"every {found.step} s, averages (n/a: not measured)")


@app.command("logs", epilog=waits.LOGS_CODES)
@friendly
def logs(ref: Annotated[str, typer.Argument(help=SESSION_REF)],
         follow: Annotated[bool, typer.Option(
             "--follow", "-f", help="Keep printing until the session ends.")] = False,
         tail: Annotated[int, typer.Option(help="Last lines.")] = 1000,
         timeout: Annotated[float | None, typer.Option(
             help="With -f: stop following after this many seconds (default: never).")]
         = None) -> None:
    """The session's output (stdout and stderr)."""
    with _client() as client:
        session = client.get_session(ref)
        try:
            outcome = waits.follow_logs(client, session, tail, follow, timeout)
        except KeyboardInterrupt:  # how one stops following: nothing went wrong
            raise typer.Exit(130) from None
    outcome.exit()


@app.command("destroy")
@friendly
def destroy(refs: Annotated[list[str], typer.Argument(help=SESSION_REFS)],
            as_json: JsonOpt = False) -> None:
    """Stop sessions: a PENDING one is CANCELLED at once, a running one is stopped."""
    with _client() as client:
        done = client.destroy_sessions(refs)
    if as_json:
        print_json(done)
        return
    for session in done:
        console.print(f"{session.name}: {session.status.value}", markup=False)


@app.command("exec", context_settings={"allow_interspersed_args": False})
@friendly
def exec_(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    timeout: Annotated[float, typer.Option(help="Seconds before it is stopped.")] = 60,
) -> None:
    """Run a command in a running session and print its output; exits with its exit code."""
    if not 0 < timeout <= 600:
        raise CliError(f"--timeout: must be more than 0 and at most 600, got {timeout:g}", 2)
    if command[:1] == ["--"]:  # `exec ID -- CMD`: options end at the id, so "--" arrives here
        command = command[1:]
    if not command:
        raise CliError("no command given: gpuslice session exec ID -- CMD [ARGS...]", 2)
    with _client() as client:
        result = client.exec(ref, command, timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    raise typer.Exit(result.exit_code)


@app.command("shell")
@friendly
def shell(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    terminal: Annotated[str | None, typer.Option(
        help="Reattach to this terminal (its id is shown when a connection is lost).")] = None,
) -> None:
    """An interactive shell in a running session (its terminal); exits with the shell's
    exit code. Keys go as they are: Ctrl-C reaches the shell, Ctrl-D or `exit` ends it."""
    from gpuslice.cli import _shell

    with _client() as client:
        sid = client.get_session(ref).id

        def open_terminal(again: str | None) -> Terminal:
            rows, cols = _shell.size()
            return client.terminal(sid, rows=rows, cols=cols, terminal=again or terminal)

        code = _shell.run(open_terminal)
    raise typer.Exit(code)


@app.command("port-forward")
@friendly
def port_forward(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    ports: Annotated[list[str], typer.Argument(
        help="PORT (the same port here) or LOCAL:REMOTE (LOCAL 0: any free port).")],
    address: Annotated[list[str] | None, typer.Option(
        "--address", help="Listen on this local address (repeatable).")] = None,
    as_stdio: Annotated[bool, typer.Option(
        "--stdio", help="Relay stdin/stdout to the one PORT instead of listening (an "
        "OpenSSH ProxyCommand).")] = False,
) -> None:
    """Forward local ports to a running session's ports, for any TCP protocol, through the
    manager (nodes behind NAT too). Runs until the session ends (exit code 1, saying so) or
    Ctrl-C; with --stdio until the connection ends."""
    from gpuslice.cli import _forward

    forwards = _forward.forwards_of(ports)
    with _client() as client:
        code = _forward.run(client, ref, forwards, address or ["127.0.0.1"], as_stdio)
    raise typer.Exit(code)
@app.command("ssh")
@friendly
def ssh(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    command: Annotated[list[str] | None, typer.Argument(
        help="A command to run instead of a login shell, after --.")] = None,
    identity: Annotated[Path | None, typer.Option(
        "--identity", "-i", help="The private key to use (default: ssh's own choice).")] = None,
) -> None:
    """OpenSSH's ssh into a running session, with the slice, variables and framework caps
    of its terminal; exits with ssh's exit code. Needs a key: `gpuslice ssh-key add`."""
    from gpuslice.cli.ssh import session_ssh

    argv = list(command or [])
    if argv[:1] == ["--"]:  # `ssh S -- CMD`: options end at the id, so "--" arrives here
        argv = argv[1:]
    raise typer.Exit(session_ssh(ref, argv, identity))


@app.command("commit")
@friendly
def commit(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    name: Annotated[str, typer.Option("--name", help="The new image: repository[:tag].")],
    as_json: JsonOpt = False,
) -> None:
    """Snapshot a running session into a new image that only you (and admins) can use."""
    with _client() as client:
        with console.status(f"committing {ref} as {name}..."):
            try:
                done = client.commit(ref, name)
            except ApiError as err:
                if err.code != "no_answer":
                    raise
                raise CliError(f"{err.message}: a commit that finished shows in `gpuslice "
                               "image list` once the manager is back") from None
    if as_json:
        print_json(done)
        return
    image = done.image
    console.print(f"committed {ref} as {image.name} ({mem(image.size)}), private to "
                  f"{image.owner or 'its owner'}", markup=False)
    console.print(f"note: {done.note}", markup=False)
    console.print(f"launch it: gpuslice session create --image {image.name}", markup=False)


def _print_pairs(lines: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        console.print(f"{key:<{width}}  {value}", markup=False)


def _reclaim(reclaim: ReclaimPublic) -> str:
    """``in 12 min (14:05 UTC): idle for 30 min: GPU util < 1 %``."""
    from datetime import UTC, datetime

    left = int((reclaim.at - datetime.now(UTC)).total_seconds())
    when = "any moment now" if left <= 0 else f"in {format_duration(left)}"
    return f"{when} ({reclaim.at:%H:%M:%S} UTC): {reclaim.reason}"


def _session_table(sessions: list[SessionPublic], owner_column: bool = False) -> None:
    columns = ["id", "name"] + (["owner"] if owner_column else []) + [
        "status", "fGPU", "cpu", "mem", "node", "image", "age", "time", "reason"]
    rows = []
    for s in sessions:
        node = s.placement.node_name if s.placement else ""
        reason = s.status_reason
        if s.queue_position is not None:
            reason = f"#{s.queue_position}: {reason}"
        rows.append(
            [s.id[:12], s.name] + ([s.owner] if owner_column else []) + [
                s.status.value, number(s.resources.gpu), number(s.resources.cpu),
                mem(s.resources.mem), node, s.image, ago(s.created_at), timing.time_column(s),
                reason]
        )
    table(columns, rows)


# The option each field of the request comes from, for the schema's complaints.
_OPTIONS = {"image": "--image", "resources.gpu": "--gpu", "resources.cpu": "--cpu",
            "resources.mem": "--mem", "resources.gpu_mem": "--gpu-mem",
            "resources": "--gpu, --gpu-mem", "count": "--count", "name": "--name",
            "type": "--type", "command_line": "--command", "command": "--command",
            "env": "--env", "priority": "--priority", "priority_class": "--priority",
            "gpu_model": "--gpu-model", "apps": "--app", "folders": "--folder",
            "time_limit": "--time", "begin_at": "--begin"}


def _request(**fields: Any) -> SessionCreate:
    """The request as the manager's schema checks it: what it refuses is a one-line error
    naming the option (exit code 2), before anything is sent."""
    from pydantic import ValidationError

    resources = {k: fields.pop(k) for k in ("gpu", "cpu", "mem", "gpu_mem")
                 if fields[k] is not None}
    try:
        return schemas.sessions.SessionCreate(resources=resources, **fields)
    except ValidationError as err:
        raise invalid_option(err, _OPTIONS) from None


def _env_pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CliError(f"--env: expected KEY=VALUE, got {item!r}", 2)
    return key, value


def _status(value: str) -> str:
    upper = value.upper()
    status = schemas.sessions.SessionStatus
    if upper not in status.__members__:
        allowed = ", ".join(s.value for s in status)
        raise CliError(f"--status: {value!r} is not a status; use one of {allowed}", 2)
    return upper
