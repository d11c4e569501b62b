"""`gpuslice image ...`: the image catalog. Commands live beside their subject:
`image build` in `gpuslice.cli.image_build`, the catalog commands here."""

from __future__ import annotations

import typer

app = typer.Typer(help="Session images: build, list, aliases.", no_args_is_help=True)
