"""`gpuslice run SCRIPT ...`: run a training script on a GPU slice, saving its output as a
model; `gpuslice run list | show | logs | stop | delete` manage runs.

The script's directory (the current one) goes to your `runs` folder under `runs/<name>/` (or
`runs/<name>.<N>/` while an earlier run of the name keeps that one),
within a size limit and minus what `.gpusliceignore` lists (and version control, caches,
virtual environments); the run is a batch session that runs it there, unchanged, with the
slice applied to PyTorch / TensorFlow / JAX when they are imported, and saves its save
directory to the model store under the run's name when it succeeds.
"""

from __future__ import annotations

import re
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from gpuslice.cli import timing, waits
from gpuslice.cli.output import (
    GPU_MEM_HELP,
    PRIORITY_HELP,
    CliError,
    GroupOpt,
    JsonOpt,
    ProjectOpt,
    ago,
    confirm,
    console,
    err_console,
    friendly,
    gpu_mem_option,
    mem,
    number,
    print_json,
    print_new,
    priority_option,
    session_client,
    table,
    transfer_bar,
)
from gpuslice.client import ApiError, Client
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.common.limits import MIN_MEM, PAGE_DEFAULT
from gpuslice.common.resources import format_mem, parse_cpu, parse_fgpu, parse_mem

if TYPE_CHECKING:
    from gpuslice.common.schemas.runs import RunPublic

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_FINAL = ("TERMINATED", "ERROR", "CANCELLED")
LAST_LINES = 15


class _RunGroup(TyperGroup):
    """`gpuslice run SCRIPT ...` is `gpuslice run start SCRIPT ...`: anything that is not one
    of the group's commands (or its help) starts a run."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["start", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_RunGroup, no_args_is_help=True,
    help="Run a training script on a GPU slice; list, show, logs, stop, delete runs.\n\n"
    "Start one with: gpuslice run SCRIPT [--gpu 0.5 | --gpu-mem 2048] [--image I] "
    "[--folder F] [--save-dir output] [--name N] [-- ARGS] (all options: gpuslice run start "
    "--help).",
)
Ref = Annotated[str, typer.Argument(help="Run id, or the name of one of your runs.")]


def _client() -> Client:
    return session_client()


START_CODES = (
    "Exit codes: 0 the script succeeded (or Ctrl-C left the run running); the script's own "
    "exit code when it failed (1 if that is not 1-255); 1 the run ended ERROR or CANCELLED "
    "(stderr says why); 2 bad input; 124 --timeout passed first (the run goes on)."
)


@app.command("start", hidden=True, epilog=START_CODES)
@friendly
def start(
    script: Annotated[Path, typer.Argument(help="The script, in the current directory.")],
    args: Annotated[list[str] | None, typer.Argument(help="After --: the script's arguments.")]
    = None,
    gpu: Annotated[str | None, typer.Option(help="fGPU, e.g. 0.5.")] = None,
    gpu_mem: Annotated[str | None, typer.Option("--gpu-mem", help=GPU_MEM_HELP)] = None,
    cpu: Annotated[str, typer.Option(help="CPU cores.")] = "1",
    mem_: Annotated[str, typer.Option("--mem", help="Memory, e.g. 4g.")] = "2g",
    image: Annotated[str, typer.Option(help="Image (name or alias).")] = DEFAULT_SESSION_IMAGE,
    folder: Annotated[list[str] | None, typer.Option(
        help="A folder to mount too: NAME or NAME:ro (repeat).")] = None,
    save_dir: Annotated[str, typer.Option(help="Saved as the model when it succeeds.")]
    = "output",
    name: Annotated[str | None, typer.Option(help="The run's (and model's) name.")] = None,
    save_var: Annotated[str | None, typer.Option(
        "--save-var", help="A variable the script leaves its model in (e.g. model): saved into "
        "--save-dir when it ends, in its framework's format (PyTorch, Keras; else "
        "joblib/pickle), with no change to the script.")] = None,
    env: Annotated[list[str] | None, typer.Option(help="K=V, repeatable.")] = None,
    project: ProjectOpt = None,
    group: GroupOpt = None,
    priority: Annotated[str | None, typer.Option(help=PRIORITY_HELP)] = None,
    max_upload: Annotated[str, typer.Option(help="Most the directory may send.")] = "100m",
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start it, do not follow.")]
    = False,
    timeout: Annotated[float | None, typer.Option(
        help="Stop following after this many seconds (default: until it ends).")] = None,
    time: Annotated[str | None, typer.Option("--time", help=timing.TIME_HELP)] = None,
    begin: Annotated[str | None, typer.Option(help=timing.BEGIN_HELP)] = None,
) -> None:
    """Run SCRIPT on a GPU slice (uploading the current directory), follow its logs, and save
    its output as a model when it succeeds. Ctrl-C asks whether to stop it or leave it."""
    body, tree = _prepare(script, args or [], gpu, gpu_mem, cpu, mem_, image, folder or [],
                          save_dir, name, env or [], max_upload)
    if save_var is not None:
        body["save_var"] = save_var
    body |= {key: value for key, value in (("project", project), ("group", group)) if value}
    body["time_limit"] = timing.time_option(time)
    body["begin_at"] = timing.begin_option(begin)
    body |= priority_option(priority)
    with _client() as client:
        client.check_run(**body)  # refused before anything is sent
        runs = _runs_folder(client)
        body["code_dir"] = _free_code_dir(client, body["name"])
        try:  # a leftover no run keeps (an upload whose run was never created)
            client.delete_file(runs.id, body["code_dir"])
        except ApiError as err:
            if err.status != 404:
                raise
        with transfer_bar(f"uploading {tree.root.name}/", tree.size) as moved:
            client.upload_dir(runs.id, tree.root, body["code_dir"], moved, tree)
        run = client.create_run(**body)
        err_console.print(f"run {run.name} started (session {run.id[:12]}); its code is in "
                          f"folder runs/{run.code_dir}/", markup=False)
        if detach:
            _hints(run.name)
            return
        raise typer.Exit(_follow(client, run, timeout))


@app.command("list")
@friendly
def list_(limit: Annotated[int, typer.Option(help="At most this many.")] = PAGE_DEFAULT,
          as_json: JsonOpt = False) -> None:
    """Your runs, newest first: status, result, exit code, how long they ran, their model."""
    with _client() as client:
        runs = client.list_runs(limit=limit)
    if as_json:
        print_json(runs)
        return
    table(["name", "status", "result", "exit", "ran", "fGPU", "gpu mem", "model", "started"],
          [(r.name, r.status.value, r.result.value if r.result else "", _exit(r),
            _duration(r.duration_s), number(r.resources.gpu),
            mem(r.resources.gpu_mem) if r.resources.gpu_mem else "",
            r.model.ref if r.model else "", ago(r.created_at)) for r in runs])


@app.command("show")
@friendly
def show(ref: Ref, as_json: JsonOpt = False) -> None:
    """A run: its script, slice, status and result, how long it ran, its model."""
    with _client() as client:
        run = client.get_run(ref)
    if as_json:
        print_json(run)
        return
    console.print(_summary(run), markup=False)
    console.print(f"script   {run.script} {' '.join(run.args)}".rstrip(), markup=False)
    console.print(f"session  {run.id} ({run.status_reason})", markup=False)


@app.command("logs", epilog=waits.LOGS_CODES)
@friendly
def logs(ref: Ref, follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
         tail: Annotated[int, typer.Option(help="Last lines.")] = 1000,
         timeout: Annotated[float | None, typer.Option(
             help="With -f: stop following after this many seconds (default: never).")]
         = None) -> None:
    """A run's output (stdout and stderr); -f keeps printing until it ends."""
    with _client() as client:
        session = client.get_session(client.get_run(ref).id)
        try:
            outcome = waits.follow_logs(client, session, tail, follow, timeout)
        except KeyboardInterrupt:  # how one stops following: nothing went wrong
            raise typer.Exit(130) from None
    outcome.exit()


@app.command("stop")
@friendly
def stop(ref: Ref) -> None:
    """Stop a run (its script gets SIGTERM, then SIGKILL after the grace period)."""
    with _client() as client:
        run = client.get_run(ref)
        client.destroy_sessions([run.id])
    console.print(f"stopping run {run.name}", markup=False)


@app.command("delete")
@friendly
def delete(ref: Ref, yes: Annotated[bool, typer.Option("--yes", "-y")] = False) -> None:
    """Forget a run that is over and delete its code (its model stays; asks first)."""
    with _client() as client:
        run = client.get_run(ref)
        confirm(f"Forget run {run.name} and delete its code in runs/{run.code_dir}/?", yes)
        client.delete_run(run.id)
    console.print(f"deleted run {run.name} (model: gpuslice model list)", markup=False)


# ------------------------------------------------------------------ helpers


def _prepare(script: Path, args: list[str], gpu: str | None, gpu_mem: str | None, cpu: str,
             memory: str, image: str, folders: list[str], save_dir: str, name: str | None,
             env: list[str], max_upload: str) -> tuple[dict[str, Any], Any]:
    """The run's body and the directory to send, checked here first."""
    from gpuslice.client import transfer

    if gpu is not None and gpu_mem is not None:
        raise CliError("give --gpu or --gpu-mem, not both", 2)
    resources: dict[str, Any] = {"cpu": cpu, "mem": memory}
    parse_cpu(cpu, field="--cpu")
    parse_mem(memory, field="--mem", minimum=MIN_MEM)
    if gpu_mem is not None:
        resources["gpu_mem"] = gpu_mem_option(gpu_mem)
    else:
        resources["gpu"] = gpu or "0"
        parse_fgpu(resources["gpu"], field="--gpu")
    root = Path.cwd()
    rel = _inside(root, script)
    run_name = name or _auto_name(script)
    if not _NAME.match(run_name):
        raise CliError(f"--name: {run_name!r}: use 1-63 lowercase letters, digits and dashes",
                       2)
    limit = parse_mem(max_upload, field="--max-upload")
    tree = transfer.scan(root, transfer.read_ignore(root))
    if rel not in {f for f, _, _ in tree.files}:
        raise CliError(f"{rel} is left out by {transfer.IGNORE_FILE} (or is not a regular "
                       "file): it must be sent to run", 2)
    if tree.size > limit:
        raise CliError(
            f"{root} holds {format_mem(tree.size)} in {len(tree.files)} files, more than "
            f"--max-upload {format_mem(limit)}: list what to leave out (data, checkpoints) in "
            f"{transfer.IGNORE_FILE}, put data in a folder (--folder), or raise --max-upload", 2)
    variables = dict(_pair(item) for item in env)
    body = {"name": run_name, "script": rel, "args": args, "image": image,
            "resources": resources, "folders": folders, "save_dir": save_dir, "env": variables}
    return body, tree


def _inside(root: Path, script: Path) -> str:
    path = (root / script).resolve() if not script.is_absolute() else script.resolve()
    if not path.is_file():
        raise CliError(f"{script}: no such file", 2)
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        raise CliError(f"{script} is not inside the current directory, which is what is sent "
                       "with it: run from the script's directory", 2) from None


def _auto_name(script: Path) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", script.stem.lower()).strip("-")[:40] or "run"
    return f"{stem}-{secrets.token_hex(3)}"


def _free_code_dir(client: Client, name: str) -> str:
    """``name``, or ``name.2``, ``name.3``, …: the first directory no earlier run of the name
    keeps, so a run of a name used before leaves that run's code and output as they were."""
    from gpuslice.common.limits import PAGE_MAX

    kept = {r.code_dir for r in client.list_runs(name=name, limit=PAGE_MAX)}
    number = 1
    while (candidate := name if number == 1 else f"{name}.{number}") in kept:
        number += 1
    return candidate


def _runs_folder(client: Client) -> Any:
    from gpuslice.common.schemas.runs import RUNS_FOLDER

    for folder in client.list_folders():
        if folder.name == RUNS_FOLDER and folder.access == "owner" and not folder.shared:
            return folder
    return client.create_folder(RUNS_FOLDER)


def _follow(client: Client, run: RunPublic, timeout: float | None) -> int:
    """Print the run's progress and logs until it ends (or Ctrl-C leaves it, or ``timeout``
    seconds pass); the exit code."""
    said: set[str] = set()
    seen: list[str] = []
    pace = waits.Pace(timeout, first=1.0)  # each look asks the node for the logs
    while True:
        try:
            run = client.get_run(run.id)
            status = run.status.value
            if status == "PENDING" and run.status_reason not in said:
                said.add(run.status_reason)
                err_console.print(f"PENDING: {run.status_reason}", markup=False)
            if status == "PENDING" and "placed" in said:  # preempted: it starts again
                said.discard("placed")
                seen = []
            if status in ("RUNNING", "TERMINATING", *_FINAL) and "placed" not in said:
                said.add("placed")
                err_console.print(_placement(client, run), markup=False)
            if status in ("RUNNING", "TERMINATING", *_FINAL):
                seen = print_new(client.session_logs(run.id).logs, seen)
            if status in _FINAL:
                return _finish(client, run)
            if not pace.wait():
                err_console.print(f"error: {waits.still(run, timeout or 0)}", markup=False)
                _hints(run.name)
                return waits.TIMEOUT
        except KeyboardInterrupt:
            if _ask_stop(run.name):
                client.destroy_sessions([run.id])
                err_console.print(f"stopping run {run.name}...", markup=False)
            else:
                _hints(run.name)
                return 0


def _ask_stop(name: str) -> bool:
    err_console.print(f"\nStop run {name} (s), or leave it running (l)? [s/l] ", end="",
                      markup=False)
    try:
        answer = sys.stdin.readline().strip().lower()
    except KeyboardInterrupt:
        return True
    return answer.startswith("s")


def _finish(client: Client, run: RunPublic) -> int:
    err_console.print(_summary(run), markup=False)
    if run.result is not None and run.result.value == "SUCCESS":
        return 0
    lines = client.session_logs(run.id, LAST_LINES).logs.splitlines()
    if lines:
        err_console.print(f"last {len(lines)} lines:", markup=False)
        for line in lines:
            err_console.print(f"  {line}", markup=False)
    if run.result is None:  # ERROR or CANCELLED: the script did not end by itself
        err_console.print(f"error: {waits.ended(run)}", markup=False)
        return waits.ENDED
    code = run.exit_code or 0
    return code if 0 < code < 256 else 1


def _summary(run: RunPublic) -> str:
    took = _duration(run.duration_s)
    slice_ = f"{number(run.resources.gpu)} fGPU"
    if run.resources.gpu_mem:
        slice_ += f" for {format_mem(run.resources.gpu_mem)} of GPU memory"
    if run.result is None:
        state = f"{run.status.value}: {run.status_reason}"
    else:
        state = f"{run.result.value} (exit code {run.exit_code})"
    text = f"run {run.name}: {state}, ran {took} on {slice_}"
    if run.model is not None:
        text += (f"; model {run.model.ref} saved ({run.model.files} file(s), "
                 f"{format_mem(run.model.size)}): gpuslice model download {run.model.ref}")
    elif run.result is not None and run.result.value == "SUCCESS":
        text += f"; no model saved (nothing in {run.save_dir}/)"
    return text


def _placement(client: Client, run: RunPublic) -> str:
    session = client.get_session(run.id)
    node = session.placement.node_name if session.placement else "its node"
    devices = session.placement.devices if session.placement else []
    if devices:  # while it holds its slice
        dev = devices[0]
        return (f"running on {node} GPU {dev.device_index}: {number(dev.gpu)} fGPU = "
                f"{mem(dev.mem)} of GPU memory ({dev.device_model})")
    gpu = f"{number(run.resources.gpu)} fGPU" if run.resources.gpu else "no GPU"
    return f"ran on {node} ({gpu})"


def _hints(name: str) -> None:
    err_console.print(f"follow it: gpuslice run logs {name} -f; stop it: gpuslice run stop "
                      f"{name}; its result: gpuslice run show {name}", markup=False)


def _exit(run: RunPublic) -> str:
    return "" if run.exit_code is None else str(run.exit_code)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CliError(f"--env: expected KEY=VALUE, got {item!r}", 2)
    return key, value
