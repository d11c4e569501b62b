"""`gpuslice admin config export / import`: the platform's configuration as a JSON document.

Policies, users (password hashes only with `--password-hashes`), image aliases and the image
catalog's curation, by name; an import merges, all or nothing, and importing twice changes
nothing. Through the API, as any admin command.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuslice.cli.output import CliError, JsonOpt, console, friendly, print_json
from gpuslice.client import Client

app = typer.Typer(help="The platform's configuration as JSON: export, import.",
                  no_args_is_help=True)


@app.command("export")
@friendly
def export(
    file: Annotated[Path | None, typer.Argument(
        help="Write it here (mode 0600); default: standard output.")] = None,
    password_hashes: Annotated[bool, typer.Option(
        "--password-hashes", help="Include users' password hashes (argon2).")] = False,
) -> None:
    """Export policies, users, image aliases and the image catalog as JSON."""
    with Client.from_config() as client:
        document = client.export_config(password_hashes=password_hashes)
    text = json.dumps(document, indent=2) + "\n"
    if file is None:
        sys.stdout.write(text)
        return
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    counts = ", ".join(f"{len(v)} {k}" for k, v in document.items() if isinstance(v, list))
    console.print(f"exported {counts} to {file}", markup=False)


@app.command("import")
@friendly
def import_(
    file: Annotated[Path, typer.Argument(help="A document `config export` wrote ('-': stdin).")],
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Check it and say what would change; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Merge a configuration document by name (all or nothing; again: no change)."""
    document = _read(file)
    with Client.from_config() as client:
        result = client.import_config(document, dry_run=dry_run)
    if as_json:
        print_json(result)
        return
    verb = "would import" if dry_run else "imported"
    parts = [f"{name}: {r.created} new, {r.updated} changed, {r.unchanged} unchanged"
             for name, r in result.sections.items()]
    console.print(f"{verb} {file}: " + "; ".join(parts), markup=False)
    for note in result.notes:
        console.print(f"note: {note}", markup=False)


def _read(file: Path) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
    except OSError as err:
        raise CliError(f"{file}: {err.strerror or err}", 2) from None
    try:
        document = json.loads(text)
    except ValueError as err:
        raise CliError(f"{file} is not JSON ({err})", 2) from None
    if not isinstance(document, dict):
        raise CliError(f"{file} is not a configuration document (a JSON object)", 2)
    return document
