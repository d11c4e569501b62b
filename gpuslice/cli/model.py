"""`gpuslice model ...`: your models in the model store (saved by runs, `gpuslice-save` in a
session, or uploaded): list, show, download, upload, delete, short-lived URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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

app = typer.Typer(help="Your models: list, show, download, upload, delete, URLs.",
                  no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="The model's name.")]


def _client() -> Client:
    return Client.from_config()


@app.command("list")
@friendly
def list_(as_json: JsonOpt = False) -> None:
    """Your saved models, and the session (run) that saved each."""
    with _client() as client:
        models = client.list_models()
    if as_json:
        print_json(models)
        return
    table(["name", "size", "files", "saved", "by"],
          [(m.name, mem(m.size), m.files, ago(m.saved_at), m.session_name or "upload")
           for m in models])


@app.command("show")
@friendly
def show(name: Name, as_json: JsonOpt = False) -> None:
    """A model's files."""
    with _client() as client:
        model = client.get_model(name)
    if as_json:
        print_json(model)
        return
    console.print(f"{model.name}: {model.files} file(s), {mem(model.size)}, saved "
                  f"{ago(model.saved_at)} by {model.session_name or 'an upload'}", markup=False)
    table(["file", "size"], [(f.path, mem(f.size)) for f in model.file_list])


@app.command("download")
@friendly
def download(name: Name, to: Annotated[Path | None, typer.Option(
        "--to", help="A directory here (default: ./NAME).")] = None) -> None:
    """Download a model's files (streamed, with progress)."""
    target = to or Path(name)
    with _client() as client:
        model = client.get_model(name)
        with transfer_bar(name, model.size) as moved:
            client.download_model(name, target, moved)
    console.print(f"model {name} → {target}/ ({model.files} file(s), {mem(model.size)})",
                  markup=False)


@app.command("upload")
@friendly
def upload(
    path: Annotated[Path, typer.Argument(help="A file or a directory.")],
    name: Annotated[str, typer.Option("--name", help="The model's name.")],
) -> None:
    """Save a file or directory as a model (a model of that name is replaced once complete)."""
    from gpuslice.client import transfer

    if not path.exists():
        raise CliError(f"{path}: no such file or directory here", 2)
    size = transfer.scan(path).size if path.is_dir() else path.stat().st_size
    with _client() as client:
        with transfer_bar(name, size) as moved:
            model = client.upload_model(path, name, moved)
    console.print(f"saved model {model.name}: {model.files} file(s), {mem(model.size)}",
                  markup=False)


@app.command("delete")
@friendly
def delete(name: Name, yes: Annotated[bool, typer.Option("--yes", "-y")] = False) -> None:
    """Delete a model and its files (asks first)."""
    with _client() as client:
        model = client.get_model(name)
        confirm(f"Delete model {name} ({model.files} file(s), {mem(model.size)})?", yes)
        client.delete_model(name)
    console.print(f"deleted model {name}", markup=False)


@app.command("url")
@friendly
def url(name: Name, ttl: Annotated[int, typer.Option(help="Seconds they last (≤ 3600).")] = 300,
        as_json: JsonOpt = False) -> None:
    """Short-lived download URLs of a model's files (whoever has one can fetch that file)."""
    with _client() as client:
        urls = client.presign_model(name, ttl)
    if as_json:
        print_json(urls)
        return
    for path, link in urls.urls.items():
        console.print(f"{path}  {link}", markup=False, soft_wrap=True)
    console.print(f"(valid until {urls.expires_at:%Y-%m-%d %H:%M:%S} UTC)", markup=False)
