"""The `gpuslice` command line (Typer + Rich), built on the SDK in `gpuslice.client`.

One module per command group or top-level command, named after it: `session`, `app`, `image`,
`node`, `admin`, `token`, `manager`, `agent`, `up`, `login`, `password`, `version`, `top`,
`usage`. `main` lists them (the entry point is `gpuslice.cli.main:app`), `output` is how they
all print, `waits` how the commands that wait on sessions end (their exit codes), `_lazy` loads
them, `_serve` runs the long-lived ones and `_shell` relays `session shell`'s terminal.

Imports: a command pays for what it uses, nothing else. People and scripts run `gpuslice --help`
and `gpuslice session list --json` all the time, and Python spends most of a short command's
time importing; tests/cli/test_imports.py holds the CLI to this rule:

1. `main.COMMANDS` names every command by module; a command's module is imported only when that
   command runs (or prints its own help), and `gpuslice --help` imports none of them.
2. At the top of a command module: the standard library, typer, `gpuslice.cli.output`, the plain
   modules of `gpuslice.common` (resources, images, limits), and the SDK's `Client` in
   modules whose commands call the manager.
3. What a command *runs* is imported in the function that runs it: the manager, the agent,
   image building (`gpuslice.imagebuild`, aiodocker, aiohttp), uvloop; and rich.table in
   `output.table`, for the commands that print a table.
4. The shared pydantic schemas are reached through `gpuslice.client.schemas` (e.g.
   `schemas.sessions.FINAL`), which imports a schema module when it is first used; annotations
   name them under `TYPE_CHECKING`. A `--json` listing that passes the manager's answer on
   unchanged prints it from `Client.get_json`, without building the models.
5. httpx is imported without its own command-line tool (below).
"""

import sys

# httpx imports its own command-line tool when it is imported (click, rich's console and
# progress, pygments: ~50 ms of every command's start); gpuslice never runs it. A None entry
# makes that one optional import fail, and httpx falls back to the stub `httpx.main` it ships
# for exactly that case. Only the CLI does this, never the SDK that programs import.
if "httpx._main" not in sys.modules:
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
