"""The `gpuslice` command line (Typer + Rich), built on the SDK in `gpuslice.client`.

One module per command group or top-level command, named after it: `session`, `image`, `node`,
`admin`, `token`, `manager`, `agent`, `up`. `main` puts them together (the entry point is
`gpuslice.cli.main:app`), `output` is how they all print and `_serve` runs the long-lived ones.
"""
