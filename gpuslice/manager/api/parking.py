"""Long waits held outside FastAPI's stack.

An agent's long-poll waits up to 50 s for its assignments to change. Waiting inside its route, it
held FastAPI's whole call stack meanwhile: some 30 coroutines, their closures, the request's
dependency stack and two database sessions, about 230 objects per poll. With 1,000 agents these
were most of the manager's live objects, and every garbage collection walked them again: its
passes (100–250 ms) were the heartbeats' slowest answers (``bench/agents.py``).

So a route that waits checks who asks and what (FastAPI does that, as for any route, and
documents it), then returns :class:`Parked` with what is left to do. FastAPI's stack unwinds: the
dependencies exit and their sessions close. :class:`Parking`, a middleware outside FastAPI's
routing, then does the wait and sends its answer; an error raised there is answered as any
route's is (``errors.answer_exception``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuslice.manager.api import errors

#: What a parked route has left to do; its argument tells whether the client has hung up.
Wait = Callable[[Callable[[], Awaitable[bool]]], Awaitable[Response]]

_SLOT = "gpuslice.parked"


class Parked(Response):
    """A route's answer still to come: ``wait`` gives it. Without :class:`Parking` around the
    app (an app built without it), the wait happens here, inside the route's stack."""

    def __init__(self, wait: Wait) -> None:
        super().__init__()
        self.wait = wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        slot = scope.get(_SLOT)
        if slot is not None:
            slot.append(self.wait)
            return
        await _answer(scope, receive, send, self.wait)


class Parking:
    """ASGI middleware: runs the wait of a route that answered :class:`Parked`, once the app
    (given a copy of the scope, so nothing the routing put there stays) has returned."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parked: list[Wait] = []
        await self.app({**scope, _SLOT: parked}, receive, send)
        if parked:
            await _answer(scope, receive, send, parked.pop())


async def _answer(scope: Scope, receive: Receive, send: Send, wait: Wait) -> None:
    hung_up = False

    async def gone() -> bool:
        """Whether the client has hung up, without waiting: what the server has received is
        looked at, past the request's body (replayed by the edge, which the route may not have
        read), so a client gone before its first look is seen there."""
        nonlocal hung_up
        while not hung_up:
            message: Message = {}
            with anyio.CancelScope() as nothing_yet:
                nothing_yet.cancel()  # the receive ends at its first wait: nothing has come
                message = await receive()
            if message.get("type") == "http.disconnect":
                hung_up = True
            elif message.get("type") != "http.request":
                return False
        return True

    try:
        response = await wait(gone)
    except Exception as exc:  # noqa: BLE001 - answered as the app answers any route's error
        response = await errors.answer_exception(Request(scope, receive), exc)
    await response(scope, receive, send)
