"""Port forwarding: a person's WebSocket carrying one TCP connection to a port of a session.

The same door as the terminal (the session's owner; RUNNING; a bearer token, or the login
cookie from our own origin), since a connection to any port of a session is as much as a
shell in it. The agent connects to the port from the node and answers before the person's
WebSocket is accepted, so a closed port is the upgrade's HTTP answer (502 ``port_closed``),
never a 101 that closes at once. After that, binary messages are the connection's bytes both
ways and a text ``{"op": "end"}`` is a half-close (``common.schemas.streams``).
"""

from __future__ import annotations

from starlette.websockets import WebSocket

from gpuslice.common.schemas.streams import OpenTcp, TcpOpened
from gpuslice.manager.api.errors import deny
from gpuslice.manager.errors import DomainError, InvalidRequest
from gpuslice.manager.proxy import sockets
from gpuslice.manager.proxy.gate import authorize
from gpuslice.manager.services.apps.access import AppRoute, Gate
from gpuslice.manager.services.apps.links import Link, LinkPool
from gpuslice.manager.services.apps.traffic import ActivityMeter
from gpuslice.manager.settings import ManagerSettings

PORTS = "1 to 65535"


async def serve_port(ws: WebSocket, session_id: str, port: str) -> None:
    """``/api/v1/sessions/{id}/ports/{port}``: relay until either end closes."""
    state = ws.app.state
    gate: Gate = state.gate
    pool: LinkPool = state.links
    meter: ActivityMeter = state.activity
    settings: ManagerSettings = state.settings
    try:
        number = _port(port)
        # The terminal's access: who may open a shell in the session may reach its ports.
        route = await authorize(ws, gate, settings, session_id, "terminal", writes=True)
        link = await open_tcp(pool, route, number)
    except DomainError as err:
        await deny(ws, err)
        return
    await ws.accept()
    meter.touch(route.session_id)
    await sockets.relay(ws, link, pool, meter, route.session_id, terminal=False)


async def open_tcp(pool: LinkPool, route: AppRoute, port: int) -> Link:
    """A link on which the agent connected to ``port`` in the session's container."""
    link, reply = await sockets.open_link(pool, route, OpenTcp(port=port).model_dump_json())
    if not isinstance(reply, TcpOpened):
        raise sockets.StreamRefused(reply)
    return link


def _port(text: str) -> int:
    # ASCII digits only: str.isdigit() also takes '²', which int() does not (a 500)
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise InvalidRequest(f"{text[:20]!r} is not a port: a port is a number from {PORTS}",
                      code="bad_port", field="port")
    return int(text)
