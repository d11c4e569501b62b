"""The manager's requests to this agent (logs, exec, commit, apps, streams): each run once.

Requests ride down with the assignments; the manager delivers each in exactly one answer (at
most once), so the agent runs a request as it arrives and keeps no record of the ones it has
seen: a request it never got (a lost answer, a restart) is the manager's to time out, and none
can arrive twice. Every request is answered with one ``PUT …/requests/{id}`` of its kind, a
failure included (the kind's ``error``).

:data:`KINDS` is the one place that says how a kind is served: a :class:`Kind` has its handler
(ask → answer) and its answer for a failure; a :class:`Stream` is answered by dialling the
manager back instead (``agent/streams``), so it has no answer at all: a failure to dial is
the manager's to time out. A new kind is one more entry there. Argv and output are never
logged: they are the session owner's, and go only into the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp

from gpuslice.agent import commit_apps
from gpuslice.agent.manager_link import LinkError, ManagerLink
from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ContainerRuntimeError
from gpuslice.agent.streams import StreamService
from gpuslice.common.schemas.agents import (
    AgentRequest,
    Answer,
    AppsAnswer,
    AppsAsk,
    CommitAnswer,
    CommitAsk,
    ExecAnswer,
    ExecAsk,
    LogsAnswer,
    LogsAsk,
    SignalAnswer,
    SignalAsk,
    StreamAsk,
)

log = logging.getLogger(__name__)
OUTPUT_CAP = 4 * 1024 * 1024  # characters of logs / stdout / stderr in an answer (its bound)
ERROR_CAP = 2000  # characters of an answer's error (its bound)


class RequestError(RuntimeError):
    """A request that cannot be served as asked (e.g. it names no session)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler may use: the node's containers, the manager, the operator's output."""

    runtime: DockerRuntime
    link: ManagerLink
    say: Callable[[str], None]
    images_changed: Callable[[], None]  # tells the manager the node's images at once
    streams: StreamService | None = None  # terminals and apps (an agent has one)


@dataclass(frozen=True, slots=True)
class Kind:
    """How the agent serves one kind of request that it answers."""

    #: ``(context, session id, ask) → answer``; may raise, then ``failed`` answers
    serve: Callable[[RequestContext, str | None, Any], Awaitable[Answer]]
    #: the answer saying why the request could not be served
    failed: Callable[[str], Answer]


@dataclass(frozen=True, slots=True)
class Stream:
    """A kind answered by dialling the manager back: ``open(context, request)`` runs the
    stream to its end; it has no answer to send, a failure only goes to the log."""

    open: Callable[[RequestContext, AgentRequest], Awaitable[None]]


class RequestRunner:
    """Runs every request the manager sends as its own task and answers it."""

    def __init__(self, context: RequestContext) -> None:
        self.context = context
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, requests: Iterable[AgentRequest]) -> None:
        """Start serving ``requests`` (from one assignments answer); returns at once."""
        for request in requests:
            task = asyncio.create_task(self.serve(request))
            self._tasks.add(task)  # a task nobody references may be collected mid-run
            task.add_done_callback(self._tasks.discard)

    async def serve(self, request: AgentRequest) -> None:
        """Run one request and answer it; a lost answer is logged (the manager times it out)."""
        kind = KINDS[request.ask.kind]
        if isinstance(kind, Stream):
            try:
                await kind.open(self.context, request)
            except Exception as err:  # nobody to answer: the waiting person times out
                log.warning("%s request %s: %s", request.ask.kind, request.id, _why(err))
            return
        answer = await self.run(request)
        try:
            await self.context.link.answer(request.id, answer)
        except LinkError as err:
            if err.status == 404:
                log.info("%s request %s is no longer awaited", request.ask.kind, request.id)
            else:
                log.warning("answer to %s request %s failed: %s", request.ask.kind, request.id,
                            err)

    async def run(self, request: AgentRequest) -> Answer:
        """The answer to ``request``: its handler's, or its kind's failure. Never raises."""
        kind = KINDS[request.ask.kind]
        assert isinstance(kind, Kind), "streams are opened, not answered"
        try:
            return await kind.serve(self.context, request.session_id, request.ask)
        except (ContainerRuntimeError, RequestError) as err:
            why = str(err)
        except aiodocker.DockerError as err:
            why = err.message
        except Exception as err:  # a bug: still answered, so nobody waits for nothing
            log.error("%s request %s failed: %s", request.ask.kind, request.id,
                      type(err).__name__)  # not the message: it may hold argv or output
            why = f"{type(err).__name__}: {err}"
        return kind.failed(why)

    async def close(self) -> None:
        """Stop what still runs (the agent is stopping; the manager times those out)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ------------------------------------------------------------------ the kinds


async def serve_logs(ctx: RequestContext, session_id: str | None, ask: LogsAsk) -> LogsAnswer:
    """The session's last ``tail`` lines, the newest 4 MiB at most."""
    text = await ctx.runtime.logs(_session(session_id), tail=ask.tail)
    return LogsAnswer(logs=text[-OUTPUT_CAP:], truncated=len(text) > OUTPUT_CAP)


async def serve_exec(ctx: RequestContext, session_id: str | None, ask: ExecAsk) -> ExecAnswer:
    """Run the command as the session's user; its output's last 4 MiB each."""
    try:
        result = await ctx.runtime.exec(
            _session(session_id), ask.command, timeout=ask.timeout_ms / 1000
        )
    except TimeoutError:
        return ExecAnswer(error=f"timed out after {ask.timeout_ms / 1000:g}s")
    return ExecAnswer(
        exit_code=result.exit_code,
        stdout=result.stdout[-OUTPUT_CAP:],
        stderr=result.stderr[-OUTPUT_CAP:],
    )


async def serve_commit(
    ctx: RequestContext, session_id: str | None, ask: CommitAsk
) -> CommitAnswer:
    """Commit the session's container as a clean image (see ``runtime/image_ops.py``)."""
    sid = _session(session_id)
    labels = {**ask.labels, **await commit_apps.apps_label(ctx.runtime, sid)}
    info = await ctx.runtime.commit(sid, ask.reference, labels)
    ctx.say(f"agent: session {sid} committed as {info.tag}")
    ctx.images_changed()  # the catalog learns the image's presence at once
    return CommitAnswer(image_id=info.image_id, size=info.size, labels=info.labels)


async def serve_apps(ctx: RequestContext, session_id: str | None, ask: AppsAsk) -> AppsAnswer:
    """The session's apps' states, one started first when asked (``agent/streams/apps.py``)."""
    return await _streams(ctx).states(_session(session_id), ask)


async def serve_signal(
    ctx: RequestContext, session_id: str | None, ask: SignalAsk
) -> SignalAnswer:
    """Send the signal to the session's container (its time limit's warning)."""
    await ctx.runtime.signal(_session(session_id), ask.signal)
    return SignalAnswer()


async def open_stream(ctx: RequestContext, request: AgentRequest) -> None:
    """Dial the manager back and serve the link (``agent/streams``)."""
    assert isinstance(request.ask, StreamAsk)
    await _streams(ctx).open_link(request.id, _session(request.session_id), request.ask)


#: Every kind of ``common.schemas.agents.Ask``, and how it is served (one entry per kind).
KINDS: dict[str, Kind | Stream] = {
    # LogsAnswer has no error field: the reason goes where the logs would
    "logs": Kind(serve_logs, lambda why: LogsAnswer(logs=_clip(f"(no logs: {why})\n"))),
    "exec": Kind(serve_exec, lambda why: ExecAnswer(error=_clip(f"could not run: {why}"))),
    "commit": Kind(
        serve_commit, lambda why: CommitAnswer(error=_clip(f"could not commit: {why}"))
    ),
    "apps": Kind(serve_apps, lambda why: AppsAnswer(error=_clip(f"no app states: {why}"))),
    "signal": Kind(serve_signal, lambda why: SignalAnswer(error=_clip(f"not sent: {why}"))),
    "stream": Stream(open_stream),
}


def _streams(ctx: RequestContext) -> StreamService:
    if ctx.streams is None:
        raise RequestError("this agent serves no streams")
    return ctx.streams


def _why(err: Exception) -> str:
    if isinstance(err, aiodocker.DockerError):
        return str(err.message)
    known = ContainerRuntimeError | RequestError | OSError | aiohttp.ClientError
    return str(err) if isinstance(err, known) else type(err).__name__


def _session(session_id: str | None) -> str:
    if not session_id:
        raise RequestError("the request names no session")
    return session_id


def _clip(text: str) -> str:
    return text if len(text) <= ERROR_CAP else f"{text[: ERROR_CAP - 1]}…"
