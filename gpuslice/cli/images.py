"""`gpuslice image ...`: the image catalog. Commands live beside their subject:
`image build` in `gpuslice.cli.image_build`, the catalog commands here."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuslice.cli.output import CliError, console, friendly, mem, number, print_json, table
from gpuslice.client import Client
from gpuslice.common.schemas.images import ImagePublic

app = typer.Typer(help="Session images: build, list, aliases.", no_args_is_help=True)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@app.command("list")
@friendly
def image_list(as_json: JsonOpt = False) -> None:
    """Images you may use: name, frameworks, size, apps, minimums, who may use them."""
    with Client.from_config() as client:
        images = client.list_images()
    if as_json:
        print_json(images)
        return
    table(
        ["name", "title", "frameworks", "size", "apps", "minimum", "visibility", "sources"],
        [(i.name + "".join(f"\n  ({a})" for a in i.aliases), i.title or "-",
          ", ".join(f"{k} {v}" for k, v in i.frameworks.items()) or "-", mem(i.size),
          ", ".join(f"{a.name}:{a.port}" for a in i.apps) or "-", _minimum(i),
          "public" if i.public else f"private ({i.owner or 'admins'})",
          ", ".join(i.sources) or "-")
         for i in images],
    )


@app.command("alias")
@friendly
def image_alias(
    name: Annotated[str, typer.Argument(help="The short name, e.g. tf2.")],
    reference: Annotated[str | None, typer.Argument(help="The image it stands for.")] = None,
    delete: Annotated[bool, typer.Option("--delete", help="Delete the alias.")] = False,
) -> None:
    """Give an image a short name (admins), or delete one with --delete."""
    with Client.from_config() as client:
        if delete:
            client.delete_image_alias(name)
            console.print(f"alias {name} deleted", markup=False)
            return
        if reference is None:
            raise CliError("give the image: gpuslice image alias NAME REFERENCE", 2)
        alias = client.set_image_alias(name, reference)
    console.print(f"{alias.name} → {alias.reference}", markup=False)


@app.command("publish")
@friendly
def image_publish(
    reference: Annotated[str, typer.Argument(help="The image, e.g. alice/env:1.")],
    private: Annotated[bool, typer.Option("--private", help="Make it private again.")] = False,
) -> None:
    """Make an image (e.g. one committed from a session) public for everyone (admins)."""
    with Client.from_config() as client:
        image = client.publish_image(reference, public=not private)
    console.print(f"{image.name}: {'public' if image.public else 'private'}", markup=False)


@app.command("remove")
@friendly
def image_remove(reference: Annotated[str, typer.Argument(help="The image.")]) -> None:
    """Remove an image from the catalog; nodes delete it once no session uses it (admins)."""
    with Client.from_config() as client:
        client.remove_image(reference)
    console.print(f"{reference}: removed from the catalog", markup=False)


@app.command("rescan")
@friendly
def image_rescan() -> None:
    """Read the configured registry and ask every node to report its images now (admins)."""
    with Client.from_config() as client:
        done = client.rescan_images()
    console.print(f"asked {done.nodes} node(s) to report their images", markup=False)
    if done.registry is not None:
        console.print(f"the registry has {done.registry} image(s)", markup=False)


def _minimum(image: ImagePublic) -> str:
    parts = [f"{number(image.min_gpu)} fGPU" if image.min_gpu else "",
             f"{number(image.min_cpu)} CPU" if image.min_cpu else "",
             mem(image.min_mem) if image.min_mem else ""]
    return ", ".join(p for p in parts if p) or "-"
