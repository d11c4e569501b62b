"""`gpuslice session port-forward`'s work: local listeners (or stdin/stdout) tunnelled to a
session's ports through the manager (``gpuslice.client.forward``), ending with the session."""

from __future__ import annotations

import asyncio
import sys

from gpuslice.cli.output import CliError
from gpuslice.client import ApiError, Client
from gpuslice.client.forward import Forward, parse_forward, serve, stdio
from gpuslice.client.tunnel import Tunnel, tunnel_url

RUNNING = "RUNNING"


def forwards_of(specs: list[str]) -> list[Forward]:
    """The forwards asked for, or a one-line error (exit code 2)."""
    if not specs:
        raise CliError("no port given: gpuslice session port-forward S PORT|LOCAL:REMOTE...", 2)
    try:
        return [parse_forward(spec) for spec in specs]
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def run(client: Client, ref: str, forwards: list[Forward], addresses: list[str],
        as_stdio: bool) -> int:
    """Forward until the session ends (listeners: exit code 1, saying so) or, with
    ``as_stdio``, until the one connection ends (0)."""
    session = client.get_session(ref)
    if session.status != RUNNING:
        raise CliError(f"session {session.name} is {session.status}: its ports are reached "
                       "once it runs", 1)
    sid, name = session.id, session.name

    async def open_tunnel(port: int) -> Tunnel:
        return await Tunnel.open(tunnel_url(client.url, sid, port), client.token)

    if as_stdio:
        if len(forwards) != 1 or forwards[0].local != forwards[0].remote:
            raise CliError("--stdio takes one port: gpuslice session port-forward S --stdio 22",
                           2)
        asyncio.run(stdio(open_tunnel, forwards[0].remote))
        return 0

    async def ended() -> str | None:
        try:
            status = str((await asyncio.to_thread(client.get_session, sid)).status)
        except ApiError as err:
            if err.status != 404:
                return None  # the manager is away for a moment: keep forwarding
            status = "gone"
        return None if status == RUNNING else f"session {name} is {status}"

    reason = asyncio.run(serve(open_tunnel, forwards, addresses, _say, ended))
    _say(f"{reason}: port forwarding stopped")
    return 1


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
