"""How the CLI speaks: Rich tables for people, ``--json`` for scripts, one line for errors."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from gpuslice.client import ApiError
from gpuslice.common import wording
from gpuslice.common.resources import MiB, ResourceError, format_mem, parse_mem

if TYPE_CHECKING:
    from gpuslice.client import Client
    from gpuslice.common.schemas.sessions import SessionPublic

# Piped output (scripts, tests) gets wide lines rather than Rich's 80-column default.
console = Console(highlight=False, soft_wrap=True,
                  width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline

# The `--json` option of every listing.
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ProjectOpt = Annotated[str | None, typer.Option(
    help="The project to run in (one you are a member of; default: your personal one).")]
GroupOpt = Annotated[str | None, typer.Option(
    help="The resource group to run in, e.g. a100 (default: any the project may use).")]

# Every command's --gpu-mem: GPU memory is spoken of in MiB (nvidia-smi, the lab's scripts), so
# a bare number is MiB here; the API's bare numbers stay bytes.
GPU_MEM_HELP = ("Instead of --gpu: the GPU memory it needs, in MiB (2048) or with a unit "
                "(2GiB, 512MiB).")


def gpu_mem_option(value: str | None) -> int | None:
    """``--gpu-mem`` in bytes (a bare number is MiB); a one-line error names the option."""
    return None if value is None else parse_mem(value, field="--gpu-mem", bare=MiB)


# A session argument: names are the caller's own sessions, admins' too (client.get_session).
SESSION_REF = "Session id, or the name of one of yours (another user's: OWNER/NAME)."
SESSION_REFS = "Session ids, or names of yours (another user's: OWNER/NAME)."

PRIORITY_HELP = (
    "Its priority class, e.g. high (`gpuslice admin priority-class list` shows them; a higher "
    "class may preempt lower-class batch sessions), or a number: its priority within its "
    "class (higher first, bounded by policy).")


def priority_option(value: str | None) -> dict[str, str | int]:
    """``--priority``: a class name, or a whole number (the priority within the class)."""
    if value is None:
        return {}
    try:
        return {"priority": int(value)}
    except ValueError:
        return {"priority_class": value}


P = ParamSpec("P")
R = TypeVar("R")


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code 1 (2 for bad input)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def friendly(func: Callable[P, R]) -> Callable[P, R]:
    """Turn every expected failure into one line on stderr and a non-zero exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except ApiError as err:
            bad_input = 400 <= err.status < 500 and err.status not in (401, 403, 404)
            fail(_with_hint(err), 2 if bad_input else 1)
        except ResourceError as err:
            fail(err.message, 2)
        except CliError as err:
            fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        raise AssertionError("unreachable")

    return wrapper


def session_client() -> Client:
    """The stored login's client for commands that name sessions: it says on stderr, once
    per session, when the session reached (by id or OWNER/NAME) is another user's."""
    from gpuslice.client import Client

    told: set[str] = set()

    def tell(session: SessionPublic) -> None:
        if session.id not in told:
            told.add(session.id)
            err_console.print(f"note: session {session.name or session.id} ({session.id}) is "
                              f"{session.owner}'s, not yours", markup=False)

    client = Client.from_config()
    client.on_other = tell
    return client


def invalid_option(err: Any, options: Mapping[str, str]) -> CliError:
    """Pydantic's first complaint about a request (``err``: a ``ValidationError``) as the one
    line a user fixes, naming the option ``options`` maps its field to: exit code 2."""
    first = err.errors()[0]
    path = [str(p) for p in first.get("loc", ())]
    option = next((options[".".join(path[:n])] for n in range(len(path), 0, -1)
                   if ".".join(path[:n]) in options), ".".join(path) or "the request")
    message, names_itself = wording.reason(first)
    if not names_itself and first.get("type") != "value_error" and "input" in first:
        # a bound or a choice ("must be 1 or more") does not say what was given
        message = f"{message}, got {first['input']!r}"
    return CliError(f"{option}: {message}", 2)


def _with_hint(err: ApiError) -> str:
    """The manager's message, and what to do when it is about the login itself."""
    if err.status == 401 and err.code != "bad_credentials":
        from gpuslice.client import load_config

        url = load_config().url or "URL"
        if "gpuslice login URL" in err.message:  # the manager says what to do: name the URL
            return err.message.replace("gpuslice login URL", f"gpuslice login {url}")
        return f"{err.message}: log in again with `gpuslice login {url}`"
    return err.message


def fail(message: str, code: int = 1) -> None:
    # a message may quote what others wrote (an app's last lines): never control sequences
    err_console.print(f"error: {_CONTROL.sub(chr(0xFFFD), message)}", markup=False)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    """A model, a list of models (or plain JSON data) as indented JSON on stdout."""
    if _is_model(data):
        data = data.model_dump(mode="json")
    elif isinstance(data, Sequence) and not isinstance(data, str):
        data = [d.model_dump(mode="json") if _is_model(d) else d for d in data]
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    from rich.table import Table  # only commands that print a table pay for it
    from rich.text import Text

    out = Table(title=title, show_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        # The first column names the row (an id, an image reference): kept whole, so that it
        # can be copied; the others fold when the terminal is narrow.
        out.add_column(column, overflow="fold", no_wrap=i == 0)
    for row in rows:
        # Cells carry what others wrote (a process's name in a session, a message): shown as
        # text, never as Rich markup nor as the terminal's control sequences
        out.add_row(*(Text(_CONTROL.sub("\ufffd", "" if v is None else str(v))) for v in row))
    console.print(out)


@contextmanager
def transfer_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar of bytes on stderr when it is a terminal (nothing when piped); yields
    the function to call with the bytes moved (negative: back, after a resume)."""
    if not sys.stderr.isatty():
        yield lambda moved: None
        return
    from rich.progress import (  # only commands that move files pay for it
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(),
               DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console) as bar:
        task = bar.add_task(description, total=total or None)
        yield lambda moved: bar.update(task, advance=moved)


def confirm(question: str, yes: bool) -> None:
    """Ask before something that cannot be undone; ``--yes`` (or no terminal) must say so."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{question} Add --yes to do it without a question.", 2)
    if not typer.confirm(question, default=False, err=True):
        raise CliError("nothing done", 1)


def ago(when: datetime | None) -> str:
    if when is None:
        return "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{max(seconds, 0)}s ago"


def mem(size: int | None) -> str:
    return "-" if size is None else format_mem(size)


def number(value: Any) -> str:
    """A Decimal amount as people write it: 0.5, 2, 1.25."""
    if value is None:
        return "-"
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _is_model(data: object) -> bool:
    # A pydantic model, known without importing pydantic: `gpuslice --help` does without it.
    return callable(getattr(data, "model_dump", None))


def print_new(text: str, printed: list[str]) -> list[str]:
    """Print the lines of a log tail that follow the lines printed before (``printed``: the
    last lines printed); the new last lines."""
    lines = text.splitlines(keepends=True)
    start = 0
    anchor = printed[-5:]
    if anchor:
        for i in range(len(lines) - len(anchor), -1, -1):
            if lines[i:i + len(anchor)] == anchor:
                start = i + len(anchor)
                break
    sys.stdout.write("".join(lines[start:]))
    sys.stdout.flush()
    return lines[-5:] if lines else printed
