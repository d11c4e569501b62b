"""`gpuslice admin backup FILE` and `gpuslice admin restore FILE`: the database, whole.

They run on a machine that has the manager's settings (`--config`, `GPUSLICE_*`) and reach its
database directly, as `pg_dump` would: a backup while the platform runs, a restore into an
empty database (the managers stopped). What they do is `gpuslice.manager.backup`'s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly

if TYPE_CHECKING:
    from gpuslice.manager.backup import Header
    from gpuslice.manager.settings import ManagerSettings

ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="The manager's TOML settings file (its database is the one used).")]
DatabaseOpt = Annotated[str | None, typer.Option(
    "--database-url", help="This database instead of the settings' (an SQLAlchemy URL).")]


@friendly
def backup(
    file: Annotated[Path, typer.Argument(help="Where to write the backup (mode 0600).")],
    config: ConfigOpt = None,
    database_url: DatabaseOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
) -> None:
    """Back up the whole database (and the settings) while the platform runs."""
    from gpuslice.manager.backup import backup as take
    from gpuslice.manager.backup import safe_url
    from gpuslice.manager.backup.settings_doc import settings_document

    settings = _settings(config, database_url)
    url = settings.database_url
    if file.is_dir():
        raise CliError(f"{file} is a directory: name the backup file", 2)
    with _errors(), _progress("backing up", quiet) as progress:
        header = asyncio.run(take(url, file, settings=settings_document(settings),
                                  progress=progress))
    console.print(f"backed up {safe_url(url)} (revision {header.revision}): "
                  f"{_summary(header)} → {file}", markup=False)


@friendly
def restore(
    file: Annotated[Path, typer.Argument(help="A file `gpuslice admin backup` wrote.")],
    config: ConfigOpt = None,
    database_url: DatabaseOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a database that is not empty.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Only read the backup through and say what it holds.")] = False,
    settings_to: Annotated[Path | None, typer.Option(
        "--settings-to", help="Also write the backed-up settings as a TOML file.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
) -> None:
    """Restore a backup into an empty database (stop the managers first); all or nothing."""
    from gpuslice.manager.backup import restore as put
    from gpuslice.manager.backup import safe_url, verify

    if not file.is_file():
        raise CliError(f"{file}: no such backup file", 2)
    if check:
        with _errors(), _progress("checking", quiet) as progress:
            header = verify(file, progress)
        console.print(f"{file}: a complete backup of revision {header.revision}, taken "
                      f"{header.created_at:%Y-%m-%d %H:%M:%S} UTC from {header.source}: "
                      f"{_summary(header)}", markup=False)
        return
    settings = _settings(config, database_url)
    url = settings.database_url
    with _errors(), _progress("restoring", quiet) as progress:
        header = asyncio.run(put(file, url, force=force, progress=progress))
    console.print(f"restored {file} (revision {header.revision}, now at head) into "
                  f"{safe_url(url)}: {_summary(header)}", markup=False)
    if settings_to is not None:
        _write_settings(header, settings_to)


def _settings(config: Path | None, database_url: str | None) -> ManagerSettings:
    from gpuslice.manager.settings import load_settings

    overrides = {"database": {"url": database_url}} if database_url else {}
    try:
        return load_settings(config, **overrides)
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"manager settings: {err}", 2) from None


@contextmanager
def _errors() -> Iterator[None]:
    from gpuslice.manager.backup import BackupError

    try:
        yield
    except BackupError as err:
        raise CliError(str(err)) from None
    except OSError as err:
        raise CliError(f"{err.filename or 'file'}: {err.strerror or err}") from None


@contextmanager
def _progress(verb: str, quiet: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    if quiet or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("rows"), console=console, transient=True) as bar:
        task = bar.add_task(verb, total=None)

        def update(table: str, done: int, total: int) -> None:
            bar.update(task, description=f"{verb} {table}", completed=done, total=total)

        yield update


def _summary(header: Header) -> str:
    biggest = sorted(header.tables, key=lambda t: -t.rows)[:4]
    return (f"{header.total_rows} rows in {len(header.tables)} tables ("
            + ", ".join(f"{t.rows} {t.name}" for t in biggest) + ", …)")


def _write_settings(header: Header, path: Path) -> None:
    from gpuslice.manager.backup.settings_doc import settings_toml

    if not header.settings:
        console.print("the backup holds no settings", markup=False)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(settings_toml(header.settings))
    console.print(f"settings written to {path} (secrets are not in backups: set them again)",
                  markup=False)
