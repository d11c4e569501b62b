"""The audit middleware: a request id on every answer, and a row for every request that
must have one (see ``README.md``) and got none inside its transaction."""

from __future__ import annotations

import logging

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuslice.manager.services.audit import record
from gpuslice.manager.services.audit.context import (
    MUTATING,
    AuditContext,
    current,
    enter,
    leave,
    request_id,
)

log = logging.getLogger(__name__)
HEADER = b"x-request-id"
_API = "/api/"
# Every attempt a row: the API's logins and the console's login form.
_LOGINS = frozenset({"/api/v1/auth/login", "/api/v1/auth/cli-token", "/login"})
_BODY_PEEK = 64 * 1024  # the body's field names are read from at most this much
# Answers that say nothing about who may do what (the body was wrong or too large).
_NOT_REFUSALS = ("validation_error", "too_large")


async def routed(connection: HTTPConnection) -> None:
    """The API router's first dependency: the request's route names its action and target
    (the scope the middleware saw is a copy made before routing). A WebSocket route's too:
    ``HTTPConnection`` is what FastAPI gives both kinds (a ``Request`` parameter fails a
    WebSocket's dependencies)."""
    ctx = current()
    if ctx is not None:
        ctx.scope = connection.scope
        ctx.name()


class AuditMiddleware:
    """ASGI middleware, outermost: see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        rid = request_id(headers.get(HEADER, b"").decode("latin-1") or None)
        scope.setdefault("state", {})["request_id"] = rid
        audited = scope["path"].startswith(_API) or (
            scope["path"] == "/login" and scope["method"] == "POST")
        client = scope.get("client")
        ctx = AuditContext(
            request_id=rid, method=scope["method"], source_ip=client[0] if client else None,
            user_agent=headers.get(b"user-agent", b"").decode("latin-1") or None, scope=scope)
        if audited and not scope["path"].startswith(_API):  # the console's login form
            ctx.action, ctx.quiet, ctx.named = "auth.login", False, True
        body = ctx.body
        peek = audited and ctx.method in MUTATING and b"json" in headers.get(b"content-type", b"")

        async def receive_body() -> Message:
            message = await receive()
            if peek and len(body) < _BODY_PEEK:
                body.extend(message.get("body", b"")[:_BODY_PEEK - len(body)])
            return message

        async def send_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (HEADER, rid.encode())]
                if audited:
                    await _finish(scope, ctx, message["status"])
            await send(message)

        token = enter(ctx)
        try:
            await self.app(scope, receive_body if peek else receive, send_id)
        except Exception:
            if audited:
                await _finish(scope, ctx, 500)
            raise
        finally:
            leave(token)


async def _finish(scope: Scope, ctx: AuditContext, status: int) -> None:
    """Write the request's row if it needs one and has none yet."""
    if ctx.finished or (status < 400 and ctx.quiet and ctx.named):
        return  # a read, answered: the common case, nothing to do
    ctx.finished = True
    _name(scope, ctx)
    committed, ctx.recorded = ctx.recorded, False
    outcome = _outcome(scope, ctx, status)
    if committed and (status < 400 or outcome is None):
        return  # the change and its row are in; a refused request that changed something
        # before it failed (a step it committed) gets a second row, its failure
    if outcome is None:
        return
    try:
        await record.write_alone(scope["app"].state.sessionmaker, ctx, outcome,
                                 None if outcome == "success" else ctx.reason or str(status))
    except Exception:  # the answer goes out all the same; the failure is in the log
        log.exception("the audit row of request %s (%s) was not written", ctx.request_id,
                      ctx.action)


def _name(scope: Scope, ctx: AuditContext) -> None:
    ctx.name()
    if ctx.action is None and scope["path"] in _LOGINS:  # refused by the edge before routing
        ctx.action = "auth.login"


def _outcome(scope: Scope, ctx: AuditContext, status: int) -> str | None:
    """The outcome of a request that gets a row, None for one that does not."""
    login = scope["path"] in _LOGINS and ctx.method == "POST"
    if status < 400:
        return None if ctx.quiet else "success"
    if status in (413, 422) and ctx.reason in (None, *_NOT_REFUSALS):
        return None  # the body was wrong (a domain refusal, quota_exceeded, has its code)
    if ctx.actor_type == "anonymous" and not login:
        return None  # unknown callers cannot grow the log (they are counted in /metrics)
    if status == 429 and login:
        ctx.reason = "throttled"
        return "denied"
    if status in (401, 403, 404):
        return "failure" if login else "denied"
    return "failure" if ctx.method in MUTATING or status >= 500 else None
