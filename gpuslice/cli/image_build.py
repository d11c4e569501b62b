"""`gpuslice image build` and `gpuslice image recipes`: session images from the recipes in
the package, built on this machine through the Docker Engine API (no manager needed)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import aiodocker
import aiohttp
import typer

from gpuslice.cli.images import app
from gpuslice.cli.output import CliError, console, friendly, print_json, table
from gpuslice.common.images import DEFAULT_SESSION_IMAGE
from gpuslice.images.base import (
    DEFAULT_CACHE_DIR,
    BaseImageOptions,
    BuildResult,
    default_extra_ca_bundle,
)
from gpuslice.images.build import build_recipe
from gpuslice.images.recipe_defs import RECIPES, RecipeOptions, plan
from gpuslice.images.rootfs import ImageBuildError


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
    ttyd_binary: Annotated[Path | None, typer.Option(
        help="notebook: a ttyd executable to serve the web terminal on port 7681.")] = None,
) -> None:
    """Build a session image from a recipe, e.g. `gpuslice image build scipy --version 1.5.2`."""
    options = RecipeOptions(
        base_image=base_image,
        extra_ca_bundle=extra_ca_bundle if extra_ca_bundle else default_extra_ca_bundle(),
        torch_index_url=torch_index, ttyd_binary=ttyd_binary, force=force,
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
