"""`gpuslice version`."""

from __future__ import annotations

from gpuslice import __version__
from gpuslice.cli.output import console


def version() -> None:
    """Print the version."""
    console.print(__version__)
