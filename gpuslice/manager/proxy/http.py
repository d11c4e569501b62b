"""An app's HTTP request, relayed: the request (its body streamed as it arrives) goes down a
link to the session's agent, the answer comes back streamed as the app sends it. Nothing is
read whole, and nothing times out a long answer: a 100 MiB download or a two-minute event
stream passes in bounded memory (the link's small inbox, and TCP's back-pressure behind it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gpuslice.common.schemas.streams import AgentReply, End, Failed, HttpHead, OpenHttp
from gpuslice.manager.proxy import headers, pages
from gpuslice.manager.services.apps.access import AppRoute
from gpuslice.manager.services.apps.links import Link, LinkClosed, LinkPool
from gpuslice.manager.services.apps.traffic import ActivityMeter

REPLIES: TypeAdapter[AgentReply] = TypeAdapter(AgentReply)
HEADS: TypeAdapter[HttpHead] = TypeAdapter(HttpHead)
SMALL = 64 * 1024  # answers up to this size are read whole before they are passed on


async def relay(request: Request, route: AppRoute, pool: LinkPool,
                meter: ActivityMeter) -> Response:
    """Pass ``request`` to the app and stream its answer back."""
    assert route.launch is not None, "the terminal is not an HTTP app"
    meter.touch(route.session_id)
    body = _has_body(request)
    ask = OpenHttp(app=route.launch, method=request.method, target=headers.target(request),
                   headers=headers.upstream(request, route, body=body), body=body, whole=SMALL)
    link = await pool.acquire(route.node_id, route.session_id, f"session {route.session_name}",
                              reuse=True)
    try:
        await link.send_text(ask.model_dump_json())
        if body:
            async for chunk in request.stream():
                if chunk:
                    await link.send_bytes(chunk)
            await link.send_text(End().model_dump_json())
        reply, whole = await _answer(link)
    except BaseException:
        pool.discard(link)
        raise
    if not isinstance(reply, HttpHead):
        pool.discard(link)
        return pages.failed(request, reply)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1"))
           for k, v in headers.downstream(reply.headers, route)]
    response: Response
    if whole is not None:  # the agent sent it all in one message: the link is free again
        pool.release(link)
        response = Response(whole, status_code=reply.status)
    elif _length(reply) <= SMALL:  # read it whole: cheaper than streaming a few bytes
        response = Response(b"".join([chunk async for chunk in _body(link, pool)]),
                            status_code=reply.status)
    else:
        response = StreamingResponse(_body(link, pool, request), status_code=reply.status)
    response.raw_headers = raw
    return response


def _length(head: HttpHead) -> int:
    """The answer's Content-Length; unknown (a stream) counts as endless."""
    for key, value in head.headers:
        if key.lower() == "content-length" and value.strip().isdigit():
            return int(value)
    return 2**63


async def _answer(link: Link) -> tuple[HttpHead | Failed | AgentReply, bytes | None]:
    """The agent's answer: its head, with the whole body when it came in one message (head
    JSON, newline, body: a small answer, ``OpenHttp.whole``), else ``None`` (it follows)."""
    try:
        message = await link.receive()
    except LinkClosed as exc:
        return _dropped(exc), None
    if isinstance(message, bytes):
        head, newline, body = message.partition(b"\n")
        if not newline:
            return Failed(status=502, code="agent_error",
                          message="the agent answered out of step"), None
        return HEADS.validate_json(head), body
    return REPLIES.validate_json(message), None


def _dropped(exc: LinkClosed) -> Failed:
    return Failed(status=502, code="agent_unreachable",
                  message=f"the session's agent dropped the stream ({exc})")


async def reply_of(link: Link) -> HttpHead | Failed | AgentReply:
    """The agent's first answer on a link; a link that closes first is a failure."""
    try:
        message = await link.receive()
    except LinkClosed as exc:
        return _dropped(exc)
    if isinstance(message, bytes):
        return Failed(status=502, code="agent_error", message="the agent answered out of step")
    return REPLIES.validate_json(message)


async def _body(link: Link, pool: LinkPool, request: Request | None = None
                ) -> AsyncIterator[bytes]:
    clean = False
    try:
        while True:
            item = await link.receive()
            if isinstance(item, bytes):
                # The client left: stop here. Starlette's own watch cancels this only once it
                # finds it waiting, which a link as fast as an in-memory one may never let
                # happen (every chunk is there already): the answer was read to its end.
                if request is not None and await request.is_disconnected():
                    return
                yield item
            else:
                clean = isinstance(REPLIES.validate_json(item), End)
                return
    finally:  # a cut-short answer (the client left): the agent may be mid-send, so close
        if clean:
            pool.release(link)
        else:
            pool.discard(link)


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in request.headers
