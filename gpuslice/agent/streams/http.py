"""An app's HTTP exchange over a link: the request as the manager sent it (its body streamed
as it arrives), the app's answer streamed back as it comes, nothing buffered whole and no
read timeout (a download or an event stream may take as long as it takes).

The app is reached at the session container's own address on its Docker network, from the
node; it is started first when it does not answer yet (``apps.AppSupervisor.ensure``). Bodies
pass as they are (compressed ones stay compressed); only hop-by-hop headers are dropped here,
what reaches the app otherwise is the manager's choice (``manager/proxy``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
from yarl import URL

from gpuslice.agent.streams.apps import Addresses, AppSupervisor
from gpuslice.agent.streams.socket import LinkSocket
from gpuslice.common.schemas.agents import AppLaunch, AppState, AppStatus
from gpuslice.common.schemas.streams import (
    End,
    Failed,
    Header,
    HttpHead,
    OpenHttp,
    without_hop_by_hop,
)

CHUNK = 256 * 1024  # most bytes per body frame
END = End().model_dump_json()
# aiohttp adds these unless told not to; the person's own (or none) must reach the app.
SKIP_AUTO = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})
_PRINTABLE = "".join(map(chr, range(0x21, 0x7F)))  # what a request-target may hold as it is


class LinkClosed(Exception):
    """The manager's end of the link went away mid-stream."""


class StreamFailure(Exception):
    """A stream that cannot be served: the :class:`Failed` message that says why."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.message)
        self.failed = failed


@dataclass(frozen=True, slots=True)
class Upstream:
    """What reaching apps needs: addresses, the supervisor, an HTTP client."""

    addresses: Addresses
    apps: AppSupervisor
    client: aiohttp.ClientSession

    async def url(self, session_id: str, app: AppLaunch, target: str, scheme: str) -> URL:
        """The app's URL at its container's address, started first if it does not answer;
        ``target`` must be a path (origin-form), which the URL keeps as it is."""
        if not target.startswith("/"):
            raise StreamFailure(Failed(status=400, code="bad_target", message=(
                f"the request-target {target[:100]!r} is not a path: an app is asked for a "
                "path starting with /")))
        address = await self.addresses.of(session_id)
        if address is None:
            raise StreamFailure(Failed(status=409, code="not_running",
                                       message="the session's container is not running"))
        if not self.apps.ready(session_id, app):
            status = await self.apps.ensure(session_id, app)
            if status.state is not AppState.READY:
                raise StreamFailure(_not_ready(status))
        # Built from its parts, never pasted after host:port: whatever the target holds,
        # the host is the container's. Bytes that are not printable ASCII are escaped.
        path, _, query = quote(target, safe=_PRINTABLE, encoding="latin-1").partition("?")
        return URL.build(scheme=scheme, host=address, port=app.port, path=path,
                         query_string=query, encoded=True)


async def serve_http(ws: LinkSocket, session_id: str, ask: OpenHttp,
                     upstream: Upstream) -> bool:
    """Serve one exchange; ``True`` when the link may carry the next one."""
    body = _Body(ws) if ask.body else None
    try:
        response = await _send(session_id, ask, upstream, body)
    except StreamFailure as failure:
        await ws.send_str(failure.failed.model_dump_json())
        return False
    async with response:
        head = HttpHead(status=response.status, headers=_headers(response.raw_headers))
        size = response.content_length
        if size is not None and size <= ask.whole:  # small: head and body in one message
            whole = await response.read()
            await ws.send_bytes(head.model_dump_json().encode() + b"\n" + whole)
        else:
            await ws.send_str(head.model_dump_json())
            while chunk := await response.content.read(CHUNK):
                await ws.send_bytes(chunk)
            await ws.send_str(END)
    # An app may answer before reading the whole body: the rest is still on the link.
    return body is None or body.done


class _Body:
    """The request body's frames, up to the manager's :class:`End`."""

    def __init__(self, ws: LinkSocket) -> None:
        self.ws = ws
        self.done = False

    async def frames(self) -> AsyncIterator[bytes]:
        while True:
            message = await self.ws.receive()
            if message.type is aiohttp.WSMsgType.BINARY:
                yield message.data
            elif message.type is aiohttp.WSMsgType.TEXT:
                self.done = True  # End: the only text a body may be followed by
                return
            else:
                raise LinkClosed("the manager closed the link during the request body")


async def _send(session_id: str, ask: OpenHttp, upstream: Upstream,
                body: _Body | None) -> aiohttp.ClientResponse:
    for attempt in (1, 2):
        url = await upstream.url(session_id, ask.app, ask.target, "http")
        try:
            return await upstream.client.request(
                ask.method, url, headers=without_hop_by_hop(ask.headers),
                data=body.frames() if body is not None else None, allow_redirects=False,
                skip_auto_headers=SKIP_AUTO, compress=None,
            )
        except aiohttp.ClientConnectorError as exc:
            # Refused before anything was sent: the app died; start it again, once.
            upstream.apps.mark_gone(session_id, ask.app.name)
            upstream.addresses.forget(session_id)
            if attempt == 2:
                raise StreamFailure(_unreachable(ask.app, exc)) from None
        except aiohttp.ClientError as exc:
            raise StreamFailure(_unreachable(ask.app, exc)) from None
    raise AssertionError("unreachable")


def _headers(raw: tuple[tuple[bytes, bytes], ...]) -> list[Header]:
    return without_hop_by_hop([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])


def _not_ready(status: AppStatus) -> Failed:
    if status.state is AppState.FAILED:
        return Failed(status=502, code="app_failed", message=status.message, app=status)
    return Failed(status=502, code="app_not_started",
                  message=status.message or f"{status.name} is {status.state.value}", app=status)


def _unreachable(app: AppLaunch, exc: Exception) -> Failed:
    return Failed(status=502, code="app_unreachable",
                  message=f"{app.name} does not answer on port {app.port}: {exc}"[:4000])
