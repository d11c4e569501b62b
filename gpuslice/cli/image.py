"""`gpuslice image ...`: the image catalog on the manager (list, alias, publish, remove,
rescan), and session images built from the recipes in the package on this machine (build,
recipes), through the Docker Engine API with no manager needed."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    console,
    friendly,
    mem,
    number,
    print_json,
    table,
)
from gpuslice.client import Client
from gpuslice.common.images import DEFAULT_SESSION_IMAGE

if TYPE_CHECKING:
    from gpuslice.common.schemas.images import ImagePublic
    from gpuslice.imagebuild.base import BaseImageOptions, BuildResult
    from gpuslice.imagebuild.recipe_defs import RecipeOptions

app = typer.Typer(help="Session images: build, list, aliases.", no_args_is_help=True)


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
    reference: Annotated[str, typer.Argument(help="The image, e.g. u/alice/env:1.")],
    private: Annotated[bool, typer.Option("--private", help="Make it private again.")] = False,
) -> None:
    """Make an image (e.g. one committed from a session) public for everyone (admins); says
    what that exposes."""
    with Client.from_config() as client:
        image = client.publish_image(reference, public=not private)
    console.print(f"{image.name}: {'public' if image.public else 'private'}", markup=False)
    if image.exposes:
        console.print(image.exposes, markup=False)


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


@app.command("build")
@friendly
def build(
    recipe: Annotated[str, typer.Argument(help="Recipe name (see `gpuslice image recipes`).")],
    version: Annotated[str | None, typer.Option(help="Default: the recipe's default.")] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if up to date.")] = False,
    extra_ca_bundle: Annotated[Path | None, typer.Option(
        help="A PEM bundle the image trusts besides Debian's. Default: "
        "GPUSLICE_EXTRA_CA_BUNDLE, else SSL_CERT_FILE.")] = None,
    base_image: Annotated[str | None, typer.Option(
        help=f"Build FROM this image (local or pulled). Default: {DEFAULT_SESSION_IMAGE}, "
        "built first when missing.")] = None,
    torch_index: Annotated[str, typer.Option(
        help="pytorch -cpu versions: PyTorch's CPU wheel index URL.")] = "",
) -> None:
    """Build a session image from a recipe, e.g. `gpuslice image build scipy --version 1.5.2`."""
    from gpuslice.imagebuild.base import (
        DEFAULT_CACHE_DIR,
        BaseImageOptions,
        default_extra_ca_bundle,
    )
    from gpuslice.imagebuild.recipe_defs import RecipeOptions, plan
    from gpuslice.imagebuild.rootfs import ImageBuildError

    options = RecipeOptions(
        base_image=base_image,
        extra_ca_bundle=extra_ca_bundle if extra_ca_bundle else default_extra_ca_bundle(),
        torch_index_url=torch_index, force=force,
    )
    try:
        plan(recipe, version, options)  # an impossible request fails before Docker is asked
    except ImageBuildError as err:
        raise CliError(str(err), 2) from None
    base_options = BaseImageOptions.from_env(
        tag=DEFAULT_SESSION_IMAGE, extra_ca_bundle=options.extra_ca_bundle, force=False,
        cache_dir=Path(os.environ.get("GPUSLICE_IMAGE_CACHE", DEFAULT_CACHE_DIR)),
        mirror=os.environ.get("GPUSLICE_DEBIAN_MIRROR") or None,
    )
    with _progress_display() as progress:
        result = _run(recipe, version, options, base_options, progress)
    verb = "built" if result.built else "up to date:"
    console.print(f"{verb} {result.tag} ({result.seconds:.0f}s)", markup=False)


@app.command("recipes")
@friendly
def recipes(
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the image recipes, their versions (default marked *) and what each holds."""
    from gpuslice.imagebuild.recipe_defs import RECIPES

    if json_:
        print_json([_recipe_json(r) for r in RECIPES.values()])
        return
    rows = []
    for r in RECIPES.values():
        versions = ", ".join(v.version + ("*" if v.version == r.default else "")
                             for v in r.versions)
        rows.append((r.name, versions, r.description))
    table(["RECIPE", "VERSIONS", "DESCRIPTION"], rows)


def _run(recipe: str, version: str | None, options: RecipeOptions,
         base_options: BaseImageOptions, progress: Callable[[str], None]) -> BuildResult:
    import aiodocker
    import aiohttp

    from gpuslice.imagebuild.build import build_recipe
    from gpuslice.imagebuild.rootfs import ImageBuildError

    async def go() -> BuildResult:
        async with aiodocker.Docker() as docker:
            return await build_recipe(docker, recipe, version, options, progress, base_options)

    try:
        return asyncio.run(go())
    except ImageBuildError as err:
        raise CliError(" ".join(str(err).split())) from None
    except (aiodocker.DockerError, aiohttp.ClientError, OSError) as err:
        raise CliError(f"the Docker Engine does not answer or refused: {err}") from None


@contextmanager
def _progress_display() -> Iterator[Callable[[str], None]]:
    """A live status line on a terminal (steps stay printed); plain timed lines otherwise."""
    started = time.monotonic()
    if not sys.stdout.isatty():
        def plain(line: str) -> None:
            if _is_noise(line):
                return
            console.print(f"[{time.monotonic() - started:6.1f}s] {line}", markup=False)

        yield plain
        return
    with console.status("starting", spinner="dots") as status:
        def live(line: str) -> None:
            elapsed = time.monotonic() - started
            if _is_step(line):
                console.print(f"[dim]{elapsed:6.1f}s[/dim] {_escape(line)}")
            status.update(f"{elapsed:.0f}s  {_escape(line[:120])}")

        yield live


def _is_noise(line: str) -> bool:
    """Docker's per-step bookkeeping (intermediate container and layer ids)."""
    text = line.split(": ", 1)[-1]
    return text.startswith(("---> ", "Removing intermediate container"))


def _is_step(line: str) -> bool:
    text = line.split(": ", 1)[-1]
    return text.startswith(("Step ", "building", "built", "pulling", "pulled", "cannot",
                            "debootstrap", "importing", "imported", "using")) or \
        "up to date" in text


def _escape(text: str) -> str:
    return text.replace("[", "\\[")


def _recipe_json(r: Any) -> dict[str, Any]:
    return {
        "name": r.name,
        "description": r.description,
        "default": r.default,
        "ci": r.ci,
        "versions": [
            {"version": v.version, "tag": f"gpuslice/{r.name}:{v.version}",
             "frameworks": v.frameworks, "gpu": v.gpu, "min_gpu": v.min_gpu / 1000,
             "min_cpu": v.min_cpu / 1000, "min_mem": v.min_mem,
             "needs_base_image": v.needs_base_image or None}
            for v in r.versions
        ],
        "unavailable": r.unavailable,
    }


def _minimum(image: ImagePublic) -> str:
    parts = [f"{number(image.min_gpu)} fGPU" if image.min_gpu else "",
             f"{number(image.min_cpu)} CPU" if image.min_cpu else "",
             mem(image.min_mem) if image.min_mem else ""]
    return ", ".join(p for p in parts if p) or "-"
