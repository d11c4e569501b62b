"""`gpuslice app ...`: a running session's apps (its terminal, Jupyter, MLflow, TensorBoard)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from gpuslice.cli.output import (
    SESSION_REF,
    JsonOpt,
    console,
    friendly,
    print_json,
    session_client,
    table,
)

app = typer.Typer(help="A session's apps: list them, open one in a browser.",
                  no_args_is_help=True)


@app.command("list")
@friendly
def app_list(ref: Annotated[str, typer.Argument(help=SESSION_REF)],
             as_json: JsonOpt = False) -> None:
    """The session's apps: name, state (stopped, starting, ready, failed), port, the process
    serving it and URL. Any port a process in the session serves is an app, named by its
    number (`python -m http.server 8000` makes app 8000)."""
    with session_client() as client:
        listed = client.list_apps(ref)
    if as_json:
        print_json(listed.apps)
        return
    table(["name", "state", "port", "process", "url", "note"], [
        (a.name, a.state.value, "" if a.port is None else str(a.port), a.process, a.url,
         "" if a.discovered else a.message) for a in listed.apps
    ])


@app.command("open")
@friendly
def app_open(
    ref: Annotated[str, typer.Argument(help=SESSION_REF)],
    name: Annotated[str, typer.Argument(help="The app, e.g. jupyter (see `app list`).")],
    browser: Annotated[bool, typer.Option(
        "--browser/--no-browser", help="Open a browser when this machine has one.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Start an app if it does not run yet and print its URL (it works in a browser once you
    log in there with your gpuslice user); opens a browser when there is one."""
    with session_client() as client:
        with console.status(f"starting {name} in {ref}..."):
            opened = client.start_app(ref, name)
    if as_json:
        print_json(opened)
        return
    console.print(opened.url, markup=False, soft_wrap=True)
    if browser and _has_display():
        import webbrowser

        webbrowser.open(opened.url)


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
