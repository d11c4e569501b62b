"""`gpuslice model ...`: your models in the model store (saved by runs, `gpuslice-save` in a
session, or uploaded): list, show, download, upload, delete, short-lived URLs. Each save of a
name is its next version: NAME means the latest, NAME:VERSION one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    ago,
    confirm,
    console,
    friendly,
    mem,
    print_json,
    table,
    transfer_bar,
)
from gpuslice.client import Client

app = typer.Typer(help="Your models: list, show, download, upload, delete, URLs.\n\nA model is "
                  "named NAME (its latest version) or NAME:VERSION, e.g. resnet:1.",
                  no_args_is_help=True)
Name = Annotated[str, typer.Argument(
    help="The model: NAME (its latest version) or NAME:VERSION.")]


def _client() -> Client:
    return Client.from_config()


@app.command("list")
@friendly
def list_(name: Annotated[str | None, typer.Argument(help="Only this name's versions.")] = None,
          as_json: JsonOpt = False) -> None:
    """Your saved models, every version of each, and the session (run) that saved each."""
    with _client() as client:
        models = client.list_models(name)
    if as_json:
        print_json(models)
        return
    table(["name", "version", "latest", "size", "files", "saved", "by"],
          [(m.name, m.version, "*" if m.latest else "", mem(m.size), m.files, ago(m.saved_at),
            m.session_name or "upload") for m in models])


@app.command("show")
@friendly
def show(name: Name, as_json: JsonOpt = False) -> None:
    """A model version's files (NAME: its latest version)."""
    with _client() as client:
        model = client.get_model(name)
    if as_json:
        print_json(model)
        return
    latest = " (latest)" if model.latest else ""
    console.print(f"{model.ref}{latest}: {model.files} file(s), {mem(model.size)}, saved "
                  f"{ago(model.saved_at)} by {model.session_name or 'an upload'}", markup=False)
    table(["file", "size"], [(f.path, mem(f.size)) for f in model.file_list])


@app.command("download")
@friendly
def download(name: Name, to: Annotated[Path | None, typer.Option(
        "--to", help="A directory here (default: ./NAME, or ./NAME-vVERSION for NAME:VERSION)."
        )] = None, as_json: JsonOpt = False) -> None:
    """Download a model version's files (NAME: its latest), streamed, with progress."""
    bare, _, version = name.partition(":")
    target = to or Path(f"{bare}-v{version}" if version else bare)
    with _client() as client:
        model = client.get_model(name)
        with transfer_bar(model.ref, model.size) as moved:
            client.download_model(model.ref, target, moved)
    if as_json:
        print_json({"model": model.ref, "to": str(target), "files": model.files,
                    "size": model.size})
        return
    console.print(f"model {model.ref} → {target}/ ({model.files} file(s), {mem(model.size)})",
                  markup=False)


@app.command("upload")
@friendly
def upload(
    path: Annotated[Path, typer.Argument(help="A file or a directory.")],
    name: Annotated[str, typer.Option("--name", help="The model's name.")],
    as_json: JsonOpt = False,
) -> None:
    """Save a file or directory as a model: a name already used gets its next version (the
    earlier versions stay)."""
    from gpuslice.client import transfer

    if not path.exists():
        raise CliError(f"{path}: no such file or directory here", 2)
    size = transfer.scan(path).size if path.is_dir() else path.stat().st_size
    with _client() as client:
        with transfer_bar(name, size) as moved:
            model = client.upload_model(path, name, moved)
    if as_json:
        print_json(model)
        return
    earlier = f"; versions 1-{model.version - 1} stay" if model.version > 1 else ""
    console.print(f"saved model {model.name} version {model.version} ({model.ref}): "
                  f"{model.files} file(s), {mem(model.size)}{earlier}", markup=False)


@app.command("delete")
@friendly
def delete(
    name: Name,
    every: Annotated[bool, typer.Option("--all", help="Every version of NAME.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete NAME:VERSION, or NAME when it has a single version; --all deletes every version
    of NAME (asks first). A deleted version's number is not given again."""
    bare, versioned = name.partition(":")[0], ":" in name
    with _client() as client:
        if versioned:
            if every:
                raise CliError(f"--all deletes every version of a name: give {bare}, not "
                               f"{name}", 2)
            doomed: list[Any] = [client.get_model(name)]
        else:
            doomed = client.list_models(bare)
            if not doomed:
                client.get_model(bare)  # the manager's own "no model named …"
            if len(doomed) > 1 and not every:
                raise CliError(
                    f"model {bare} has {len(doomed)} versions ({_versions(doomed)}): delete "
                    f"one with gpuslice model delete {bare}:VERSION, or all of them with "
                    f"--all", 2)
        what = (f"version {doomed[0].version} of model {bare}" if len(doomed) == 1 else
                f"all {len(doomed)} versions of model {bare} ({_versions(doomed)})")
        size = sum(m.size for m in doomed)
        confirm(f"Delete {what}, {mem(size)}?", yes)
        deleted = client.delete_model(name, every=every)
    if as_json:
        print_json(deleted)
        return
    console.print(f"deleted model {deleted.name} version(s) "
                  f"{', '.join(map(str, deleted.versions))}", markup=False)


@app.command("url")
@friendly
def url(name: Name, ttl: Annotated[int, typer.Option(help="Seconds they last (≤ 3600).")] = 300,
        as_json: JsonOpt = False) -> None:
    """Short-lived download URLs of a model version's files (whoever has one can fetch that
    file)."""
    with _client() as client:
        urls = client.presign_model(name, ttl)
    if as_json:
        print_json(urls)
        return
    for path, link in urls.urls.items():
        console.print(f"{path}  {link}", markup=False, soft_wrap=True)
    console.print(f"(valid until {urls.expires_at:%Y-%m-%d %H:%M:%S} UTC)", markup=False)


def _versions(models: list[Any]) -> str:
    return ", ".join(str(m.version) for m in models)
