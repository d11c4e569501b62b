"""`gpuslice admin backup FILE` and `gpuslice admin restore FILE`: the whole platform.

They run on a machine that has the manager's settings (`--config`, `GPUSLICE_*`, or the
`--data-dir` of a `gpuslice up`) and reach its database and directories directly, as `pg_dump`
would: a backup while the platform runs, a restore into an empty database and a fresh data
directory (the managers stopped). What is in a backup: the database, the data directory's own
files (the admin credentials, the local agent's state), every storage folder and the local
model store (with its signing key); `--database-only` leaves the files out. A backup is signed
with the backup key (`backup-key` in the data directory, or `--key`), which a restore and a
`restore --check` need. What they do is `gpuslice.manager.backup`'s.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli.output import CliError, console, friendly

if TYPE_CHECKING:
    from gpuslice.manager.backup import Header
    from gpuslice.manager.backup.members import Area
    from gpuslice.manager.settings import ManagerSettings

Update = Callable[[str, int, int], None]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="The manager's TOML settings file (its database is the one used).")]
DatabaseOpt = Annotated[str | None, typer.Option(
    "--database-url", help="This database instead of the settings' (an SQLAlchemy URL).")]
DataDirOpt = Annotated[Path | None, typer.Option(
    "--data-dir", help="The platform's data directory (as `gpuslice up --data-dir`).")]
DatabaseOnlyOpt = Annotated[bool, typer.Option(
    "--database-only", help="The database alone: no storage folders, models or credentials.")]
KeyOpt = Annotated[Path | None, typer.Option(
    "--key", help="The backup key file (default: backup-key in the data directory).")]


@friendly
def backup(
    file: Annotated[Path, typer.Argument(help="Where to write the backup (mode 0600).")],
    config: ConfigOpt = None,
    database_url: DatabaseOpt = None,
    data_dir: DataDirOpt = None,
    database_only: DatabaseOnlyOpt = False,
    key_file: KeyOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
) -> None:
    """Back up the whole platform (database, files, models, credentials) while it runs.

    The backup is signed (HMAC-SHA256) with the backup key: the file backup-key in the data
    directory, made by the first backup and never in a backup. Keep a copy of it away from
    this machine: a restore or a check elsewhere needs it (--key).
    """
    from gpuslice.manager.backup import backup as take
    from gpuslice.manager.backup import keys, safe_url
    from gpuslice.manager.backup.record import record
    from gpuslice.manager.backup.settings_doc import settings_document

    settings = settings_of(config, database_url, data_dir)
    url = settings.database_url
    if file.is_dir():
        raise CliError(f"{file} is a directory: name the backup file", 2)
    with _errors():
        key, made = keys.load_or_create(_key_file(key_file, settings))
    if made:
        console.print(f"note: made the backup key {key.source} (mode 0600): keep a copy of it "
                      "away from this machine, a restore elsewhere needs it (--key)",
                      markup=False)
    areas = [] if database_only else _areas(settings)
    for area in areas:
        if area.external is not None:
            console.print(f"note: the model store is {area.external}: not in this backup "
                          "(back the bucket up with its own tools)", markup=False)
    with _errors(), _progress("backing up", quiet) as (rows, files):
        taken = asyncio.run(take(url, file, key, settings=settings_document(settings),
                                 areas=areas, progress=rows, file_progress=files))
    header = taken.header
    console.print(f"backed up {safe_url(url)} (revision {header.revision}): "
                  f"{_summary(header)} → {file}", markup=False)
    console.print(f"signed with backup key {key.id} ({key.source})", markup=False)
    if taken.gone:
        console.print(f"note: {taken.gone} file(s) were deleted while the backup ran and are "
                      "not in it", markup=False)
    unrecorded = asyncio.run(record(url, header, file.stat().st_size, database_only))
    if unrecorded is not None:
        console.print(f"note: the backup is complete, but its success could not be recorded "
                      f"for /metrics: {unrecorded}", markup=False)


@friendly
def restore(
    file: Annotated[Path, typer.Argument(help="A file `gpuslice admin backup` wrote.")],
    config: ConfigOpt = None,
    database_url: DatabaseOpt = None,
    data_dir: DataDirOpt = None,
    database_only: DatabaseOnlyOpt = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a database and files that are there.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Only read the backup through and say what it holds.")] = False,
    settings_to: Annotated[Path | None, typer.Option(
        "--settings-to", help="Also write the backed-up settings as a TOML file.")] = None,
    key_file: KeyOpt = None,
    trust_unsigned: Annotated[bool, typer.Option(
        "--trust-unsigned", help="Accept a backup whose MAC cannot be checked: one made "
        "before backups were signed (format 1 or 2), or one whose backup key is lost; only "
        "one kept where no one else could write. A MAC that does not match is refused "
        "still.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
) -> None:
    """Restore a backup into an empty database and a fresh data directory (stop the managers
    first); all or nothing.

    The backup's MAC is checked first, with the backup key (backup-key in the data directory,
    or --key FILE: the key of the platform that made it), and a backup that does not match is
    refused before anything is written; so is one made before backups were signed, unless
    --trust-unsigned. A restored data directory without a key gets the one used.
    """
    from gpuslice.manager.backup import restore as put
    from gpuslice.manager.backup import safe_url, verify

    if not file.is_file():
        raise CliError(f"{file}: no such backup file", 2)
    if check:  # the key is all it needs: on another machine, --key alone
        key = key_file.expanduser() if key_file is not None else _key_file(
            None, settings_of(config, database_url, data_dir))
        with _errors(), _progress("checking", quiet) as (rows, files):
            header = verify(file, key, trust_unsigned=trust_unsigned, progress=rows,
                            file_progress=files)
        console.print(f"{file}: a complete backup of revision {header.revision}, taken "
                      f"{header.created_at:%Y-%m-%d %H:%M:%S} UTC from {header.source}, "
                      f"{_signed(header, key)}: {_summary(header)}", markup=False)
        return
    settings = settings_of(config, database_url, data_dir)
    key = _key_file(key_file, settings)
    url = settings.database_url
    targets = None if database_only else _targets(settings)
    with _errors(), _progress("restoring", quiet) as (rows, files):
        header = asyncio.run(put(file, url, key, trust_unsigned=trust_unsigned, force=force,
                                 targets=targets, progress=rows, file_progress=files))
    where = "" if targets is None else f" and {settings.data_dir}"
    console.print(f"restored {file} (revision {header.revision}, now at head) into "
                  f"{safe_url(url)}{where}: {_summary(header)}", markup=False)
    _restore_notes(header, targets)
    if settings_to is not None:
        _write_settings(header, settings_to)


def _key_file(given: Path | None, settings: ManagerSettings) -> Path:
    from gpuslice.manager.backup.keys import default_key_file

    return given.expanduser() if given is not None else default_key_file(
        settings.data_dir.expanduser().absolute())


def _signed(header: Header, key: Path) -> str:
    from gpuslice.manager.backup.errors import BackupError
    from gpuslice.manager.backup.keys import load

    if header.key_id is None:
        return f"unsigned (format {header.format_version}, accepted by --trust-unsigned)"
    try:
        checked = load(key).id == header.key_id
    except BackupError:
        checked = False
    if not checked:
        return (f"signed with backup key {header.key_id}, which is not at hand: its MAC was "
                "not checked (accepted by --trust-unsigned)")
    return f"its MAC matching backup key {header.key_id}"


def _restore_notes(header: Header, targets: dict[str, Path] | None) -> None:
    """One line for each area a restore did not put in place."""
    for area in header.areas:
        if area.external is not None:
            console.print(f"note: the backed-up model store was {area.external}: not in the "
                          "backup, restore the bucket with its own tools", markup=False)
        elif targets is not None and area.name not in targets and area.entries:
            console.print(f"note: the backup's local model store ({area.entries} entries) was "
                          "checked but not restored: this platform's model store is on S3",
                          markup=False)


def settings_of(config: Path | None, database_url: str | None,
              data_dir: Path | None) -> ManagerSettings:
    from gpuslice.manager.settings import load_settings

    overrides: dict[str, Any] = {"database": {"url": database_url}} if database_url else {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir.expanduser().absolute()
    try:
        settings = load_settings(config, **overrides)
        # `gpuslice up` runs with settings of its command line (--fgpu-per-gpu): the same
        # here, so that the backup records what the platform runs with
        up_options = _up_options(settings.data_dir)
        if up_options:
            settings = load_settings(config, **(up_options | overrides))
    except (FileNotFoundError, ValueError) as err:
        raise CliError(f"manager settings: {err}", 2) from None
    return settings


def _up_options(data_dir: Path) -> dict[str, Any]:
    from gpuslice.cli.up import UP_OPTIONS_FILE

    try:
        found = json.loads((data_dir / UP_OPTIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _areas(settings: ManagerSettings) -> list[Area]:
    """What a backup holds besides the database: the data directory's own files, the storage
    folders and the local model store, each once, the database and locks left out."""
    from gpuslice.cli.up import LOCK_FILE
    from gpuslice.manager.backup.keys import default_key_file
    from gpuslice.manager.backup.members import Area
    from gpuslice.manager.db.in_use import SUFFIX, database_file

    data, storage, models = (p.absolute() for p in (
        settings.data_dir, settings.storage_root, settings.model_dir))
    skip = {data / LOCK_FILE, data / "agent" / "agent.lock", data / ".restoring-data",
            default_key_file(data), storage, models}  # the key is never in a backup
    database = database_file(settings.database_url)
    if database is not None:
        database = database.absolute()
        skip |= {Path(f"{database}{s}") for s in ("", "-wal", "-shm", "-journal", SUFFIX)}
    store = settings.model_store
    external = None if store.backend == "local" else (
        f"S3 bucket {store.s3_bucket} (prefix {store.s3_prefix or 'none'})")
    return [Area("data", data, frozenset(skip)), Area("storage", storage),
            Area("models", models, external=external)]


def _targets(settings: ManagerSettings) -> dict[str, Path]:
    targets = {"data": settings.data_dir.absolute(), "storage": settings.storage_root.absolute()}
    if settings.model_store.backend == "local":
        targets["models"] = settings.model_dir.absolute()
    return targets


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
def _progress(verb: str, quiet: bool) -> Iterator[tuple[Update | None, Update | None]]:
    """Two progress callbacks, on one display: rows of the database, bytes of the files."""
    if quiet or not console.is_terminal:
        yield None, None
        return
    from rich.progress import BarColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[done]}"),
                  console=console, transient=True) as bar:
        rows = bar.add_task(verb, total=None, done="")
        files = bar.add_task(f"{verb} files", total=None, done="", visible=False)

        def on_rows(table: str, done: int, total: int) -> None:
            bar.update(rows, description=f"{verb} {table}", completed=done, total=total,
                       done=f"{done}/{total} rows")

        def on_files(path: str, done: int, total: int) -> None:
            bar.update(files, description=f"{verb} {path[-40:]}", completed=done,
                       total=max(total, done), visible=True,
                       done=f"{_size(done)} of {_size(max(total, done))}")

        yield on_rows, on_files


def _summary(header: Header) -> str:
    biggest = sorted(header.tables, key=lambda t: -t.rows)[:4]
    text = (f"{header.total_rows} rows in {len(header.tables)} tables ("
            + ", ".join(f"{t.rows} {t.name}" for t in biggest) + ", …)")
    copied = [a for a in header.areas if a.external is None]
    if copied:
        text += "; files: " + ", ".join(
            f"{a.name} {a.entries} entries ({_size(a.bytes)})" for a in copied)
    return text


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


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
