"""The in-session endpoint: the one door from inside a session to the platform.

Sessions never reach the manager's API and hold no credential. Instead the agent serves one Unix
socket per session container, in that session's own files directory on the node
(``<data_dir>/sessions/<id>/run/gpuslice/agent.sock``, mounted at ``/run/gpuslice`` inside it and
named by ``$GPUSLICE_ENDPOINT``). The socket a call comes through says which session calls: no
secret travels, none can be stolen, and a call that claims to be another session (a
``session_id`` in the query or JSON body, or an ``X-Gpuslice-Session`` header) is refused with
403. Calls that need the manager are relayed on the agent's own authenticated link, addressed to
the calling session (:meth:`EndpointCall.relay`), and the manager answers them only for a session
that runs on this node.

Features add their calls with :meth:`SessionEndpoint.route` (JSON in, JSON out) or
:meth:`SessionEndpoint.route_stream` (a body of any size, streamed on to the manager with
:meth:`EndpointCall.relay_stream`, never held whole); this module serves ``GET /v1/session``
(who am I, my slice) and ``GET /v1/usage`` (what I use now). Answers are JSON; errors are
``{code, message}`` and never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from gpuslice.agent.manager_link import FAIL_OVER_STATUS, LinkError, ManagerLink
from gpuslice.common.backoff import Backoff
from gpuslice.session_tools import CONTAINER_ENDPOINT

log = logging.getLogger(__name__)
SOCKET_IN_FILES = CONTAINER_ENDPOINT.lstrip("/")  # under a session's files directory
MAX_BODY = 2 * 1024 * 1024  # a JSON call (a model's file list: thousands of files)
_CLAIMS = ("session_id", "session")
# How long a relayed call waits for a manager that cannot be reached (restarting, failing
# over) before answering 502: within the in-session client's 30 s, which then waits longer
# itself (gpuslice-run, while saving a run's output).
RELAY_PATIENCE = 15.0


class EndpointData(Protocol):
    """What the agent knows of a session, for the endpoint's own calls."""

    async def session_info(self, session_id: str) -> dict[str, Any] | None: ...

    def usage(self, session_id: str) -> dict[str, Any] | None: ...


class EndpointError(Exception):
    """A call that cannot be answered: ``status``, a stable ``code`` and a sentence."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True, slots=True)
class EndpointCall:
    """One call from inside a session: who (by socket), what it sent, and the way onwards."""

    session_id: str
    query: Mapping[str, str]
    body: Mapping[str, Any]
    link: ManagerLink
    pid: int | None = None  # the calling process, as this host sees it (SO_PEERCRED)

    async def relay(self, method: str, path: str, body: Any = None) -> Any:
        """Ask the manager for this session: ``/api/v1/agents/me/sessions/<id>/<path>``; while
        it cannot be reached, again with backoff, for up to ``RELAY_PATIENCE`` seconds."""
        backoff = Backoff(0.25, 4.0)
        deadline = asyncio.get_running_loop().time() + RELAY_PATIENCE
        while True:
            try:
                return await self.link.session_call(self.session_id, method, path, body)
            except LinkError as err:
                delay = backoff.next()
                late = asyncio.get_running_loop().time() + delay > deadline
                away = not err.status or err.status in FAIL_OVER_STATUS
                if not away or late:  # refused (an answer), or waited long enough
                    raise _relayed(err) from None
                await asyncio.sleep(delay)

    async def relay_stream(
        self, method: str, path: str, params: Mapping[str, str], body: AsyncIterator[bytes],
        size: int,
    ) -> Any:
        """Stream ``body`` (``size`` bytes) to the manager for this session, as it comes."""
        try:
            return await self.link.session_stream(self.session_id, method, path, params, body,
                                                  size)
        except LinkError as err:
            raise _relayed(err) from None


def _relayed(err: LinkError) -> EndpointError:
    status = err.status if 400 <= err.status < 500 else 502
    return EndpointError(status, "manager_refused" if err.status else "manager_unreachable",
                         str(err))


Handler = Callable[[EndpointCall], Awaitable[Any]]
#: ``(call, body, size)``: the body as it arrives, and its Content-Length (None: not sent)
StreamHandler = Callable[[EndpointCall, AsyncIterator[bytes], int | None], Awaitable[Any]]
STREAM_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Site:
    site: web.UnixSite
    directory: int  # the descriptor of the socket's directory, open while it is served
    address: str  # what the socket was bound at (and ``getsockname`` reports)


class SessionEndpoint:
    """Serves every session container of this node its own socket. ``sync()`` keeps the set of
    sockets equal to the set of session containers; ``open()`` makes one before a start."""

    def __init__(
        self, files_root: Path, data: EndpointData, link: ManagerLink, user: str
    ) -> None:
        self.files_root = files_root
        self.data = data
        self.link = link
        uid, gid = user.split(":")
        self._owner = (int(uid), int(gid))
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/v1/session"): self._session,
            ("GET", "/v1/usage"): self._usage,
        }
        self._streams: dict[tuple[str, str], StreamHandler] = {}
        self._sites: dict[str, _Site] = {}
        self._sockets: dict[str, str] = {}  # the address a socket was bound at -> session id
        self._runner: web.AppRunner | None = None

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Add a call (``POST /v1/models/presign`` …); the handler gets an :class:`EndpointCall`
        and returns the JSON answer, or raises :class:`EndpointError`."""
        self._routes[(method.upper(), path)] = handler

    def route_stream(self, method: str, path: str, handler: StreamHandler) -> None:
        """Add a call whose body is streamed (``PUT /v1/models/file`` …), any size."""
        self._streams[(method.upper(), path)] = handler

    def socket_path(self, session_id: str) -> Path:
        return self.files_root / "sessions" / session_id / SOCKET_IN_FILES

    async def open(self, session_id: str) -> None:
        """Serve ``session_id``'s socket (again: a stale file from a dead agent is replaced)."""
        if session_id in self._sites:
            return
        runner = await self._ensure_runner()
        path = self.socket_path(session_id)
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        # A socket's address is at most 108 bytes, and a data directory can be deep: bind
        # through a descriptor of its directory. The descriptor stays open with the socket, so
        # the address names this session alone for as long as it is served.
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        address = f"/proc/self/fd/{directory}/{path.name}"
        site = web.UnixSite(runner, address)
        try:
            await site.start()
            self._secure(path)
        except BaseException:
            os.close(directory)
            raise
        self._sites[session_id] = _Site(site, directory, address)
        self._sockets[address] = session_id

    async def close(self, session_id: str) -> None:
        served = self._sites.pop(session_id, None)
        if served is None:
            return
        self._sockets.pop(served.address, None)
        try:
            await served.site.stop()
        finally:
            # Off the event loop: closing the directory's descriptor waits in the kernel, ~2.5
            # ms a session at full throughput (0.1 ms of it CPU), time the loop serves others.
            await asyncio.to_thread(_unbind, self.socket_path(session_id), served.directory)

    async def sync(self, session_ids: Collection[str]) -> None:
        """Sockets for exactly these sessions (the node's session containers)."""
        for gone in set(self._sites) - set(session_ids):
            await self.close(gone)
        for session_id in session_ids:
            try:
                await self.open(session_id)
            except OSError as exc:  # its files directory went away meanwhile
                log.warning("in-session endpoint of %s: %s", session_id, exc)

    async def stop(self) -> None:
        for session_id in list(self._sites):
            await self.close(session_id)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ serving

    async def _ensure_runner(self) -> web.AppRunner:
        if self._runner is None:
            app = web.Application(client_max_size=MAX_BODY)
            app.router.add_route("*", "/{tail:.*}", self._dispatch)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await self._runner.setup()
        return self._runner

    def _secure(self, path: Path) -> None:
        # Only the session's user may connect (connecting needs write permission); the
        # directory is this session's alone, mounted into its container only.
        if os.geteuid() == 0:
            os.chown(path, *self._owner)
            path.chmod(0o600)
        else:  # a developer's agent that runs unprivileged cannot give the file away
            path.chmod(0o666)

    async def _dispatch(self, request: web.Request) -> web.Response:
        try:
            session_id = self._caller(request)
            where = (request.method, request.path)
            streamed = self._streams.get(where)
            if streamed is not None:
                _refuse_other_session(session_id, request, {})
                call = EndpointCall(session_id, dict(request.query), {}, self.link)
                chunks = request.content.iter_chunked(STREAM_CHUNK)
                return _json(200, await streamed(call, chunks, request.content_length))
            handler = self._routes.get(where)
            if handler is None:
                calls = ", ".join(f"{m} {p}" for m, p in sorted({*self._routes, *self._streams}))
                raise EndpointError(404, "no_such_call",
                                    f"no {request.method} {request.path}; calls: {calls}")
            body = await _body(request)
            _refuse_other_session(session_id, request, body)
            call = EndpointCall(session_id, dict(request.query), body, self.link,
                                _peer_pid(request))
            return _json(200, await handler(call))
        except EndpointError as err:
            return _json(err.status, {"code": err.code, "message": err.message})
        except Exception:
            log.exception("in-session endpoint: %s %s failed", request.method, request.path)
            return _json(500, {"code": "internal_error",
                               "message": "the node's agent failed; its log has the details"})

    def _caller(self, request: web.Request) -> str:
        where = request.transport.get_extra_info("sockname") if request.transport else None
        session_id = self._sockets.get(str(where))
        if session_id is None:
            raise EndpointError(403, "unknown_session", "this socket belongs to no session")
        return session_id

    async def _session(self, call: EndpointCall) -> Any:
        info = await self.data.session_info(call.session_id)
        if info is None:
            raise EndpointError(404, "not_found", "this session is not known on this node")
        return info

    async def _usage(self, call: EndpointCall) -> Any:
        usage = self.data.usage(call.session_id)
        if usage is None:
            raise EndpointError(404, "not_measured", "no usage measured for this session yet")
        return usage


def _unbind(path: Path, directory: int) -> None:
    """Remove a socket no longer served, and close the descriptor of its directory."""
    try:
        path.unlink(missing_ok=True)
    finally:
        os.close(directory)


def _peer_pid(request: web.Request) -> int | None:
    # The kernel states who connected (translated into this agent's PID namespace): a call
    # about "my process" cannot name another one.
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = struct.unpack("3i", raw)[0]
    return pid if pid > 0 else None


def _refuse_other_session(session_id: str, request: web.Request, body: Mapping[str, Any]) -> None:
    claims = [request.headers.get("X-Gpuslice-Session")]
    claims += [request.query.get(key) for key in _CLAIMS]
    claims += [body.get(key) for key in _CLAIMS]
    for claim in claims:
        if claim is not None and claim != session_id:
            raise EndpointError(403, "wrong_session",
                                f"this endpoint answers only for session {session_id}")


async def _body(request: web.Request) -> Mapping[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        value = await request.json()
    except web.HTTPRequestEntityTooLarge:
        raise EndpointError(
            413, "too_large", f"a call's body is at most {MAX_BODY} bytes"
        ) from None
    except ValueError:
        raise EndpointError(400, "bad_json", "the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise EndpointError(400, "bad_json", "the body must be a JSON object")
    return value


def _json(status: int, value: Any) -> web.Response:
    return web.Response(status=status, text=json.dumps(value), content_type="application/json")
