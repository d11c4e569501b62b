"""The one place errors become HTTP answers, always ``{code, message, field}``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError, WebSocketRequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpuslice.common import wording
from gpuslice.common.schemas.errors import ErrorBody
from gpuslice.common.text import scrub
from gpuslice.manager import errors
from gpuslice.manager.db.faults import classify
from gpuslice.manager.services.audit import context as audit

log = logging.getLogger(__name__)

STATUS: list[tuple[type[errors.DomainError], int]] = [
    (errors.NotFound, 404),
    (errors.Unauthorized, 401),
    (errors.Forbidden, 403),
    (errors.Conflict, 409),
    (errors.AgentTimeout, 504),
    (errors.Unavailable, 503),
    (errors.TooManyRequests, 429),
    (errors.TooLarge, 413),
    (errors.InvalidRequest, 422),
    (errors.DomainError, 400),
]
_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 413: "too_large",
    415: "unsupported_media_type", 429: "too_many_requests",
}
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.DomainError, _domain)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    # A WebSocket's bad query (a terminal's rows=0): FastAPI's own answer is a bare 403
    app.add_exception_handler(WebSocketRequestValidationError,
                              _socket_validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    # What a database failure raises gets its own handlers: Starlette re-raises whatever
    # reaches the catch-all one (so the server logs a traceback for each), and a database
    # that is down or full is not a bug.
    for kind in _database_errors():
        app.add_exception_handler(kind, _unexpected)
    app.add_exception_handler(Exception, _unexpected)


async def answer_exception(request: Request, exc: Exception) -> JSONResponse:
    """The answer to ``exc`` raised outside the app's exception handlers (a parked wait's):
    the one its handler gives."""
    if isinstance(exc, errors.DomainError):
        return await _domain(request, exc)
    return await _unexpected(request, exc)


def status_of(exc: errors.DomainError) -> int:
    """The HTTP status of a domain error (one with its own ``status`` keeps it)."""
    own = getattr(exc, "status", None)
    return own if isinstance(own, int) else next(s for cls, s in STATUS if isinstance(exc, cls))


async def deny(websocket: WebSocket, exc: errors.DomainError) -> None:
    """Refuse a WebSocket upgrade with the error as an HTTP answer (never a 101)."""
    response = _answer(status_of(exc), exc.code, exc.message, exc.field, _headers_of(exc))
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:  # a server without the denial extension: a bare 403
        await websocket.close(1008)


def _headers_of(exc: errors.DomainError) -> dict[str, str] | None:
    if isinstance(exc, errors.TooManyRequests):
        return {"Retry-After": str(exc.retry_after)}
    return None


def _answer(
    status: int, code: str, message: str, field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    # A message may quote the input it refuses: what no answer can carry is replaced. It is
    # shown as plain text (the console, the CLI): a command is quoted, not in Markdown's ticks.
    text = scrub(message).replace("`", '"')
    body = ErrorBody(code=code, message=text, field=scrub(field)).model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


async def _domain(_request: Request, exc: errors.DomainError) -> JSONResponse:
    audit.refused(exc.code)
    return _answer(status_of(exc), exc.code, exc.message, exc.field, _headers_of(exc))


async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
    audit.refused("validation_error")
    return _invalid(exc.errors())


async def _socket_validation(websocket: WebSocket, exc: WebSocketRequestValidationError) -> None:
    """The upgrade's answer is the one-line 422 a request gets, never a 101."""
    try:
        await websocket.send_denial_response(_invalid(exc.errors()))
    except RuntimeError:  # a server without the denial extension: a bare 403
        await websocket.close(1008)


def _invalid(found: Sequence[Any]) -> JSONResponse:
    first = found[0] if found else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    # The message in words (the console and the CLI show it as it is); the path in `field`.
    return _answer(422, "validation_error", wording.sentence(first), ".".join(loc) or None)


async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    audit.refused(code)
    return _answer(exc.status_code, code, str(exc.detail))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    fault = classify(exc, request.app.state.settings.database_url)
    if fault is not None:
        # Not a bug: the database is down, locked or full. Nothing was half-written (the
        # transaction rolled back); the caller may try again once it is fixed.
        log.warning("%s %s: %s", request.method, request.url.path, fault.sentence())
        return _answer(503, "database_unavailable", _DATABASE_ANSWER.get(
            fault.kind, "the manager cannot use its database now") + "; try again later")
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _answer(500, "internal_error", "internal error; the manager log has the details")


def _database_errors() -> list[type[Exception]]:
    kinds: list[type[Exception]] = [SQLAlchemyError, OSError]
    try:  # asyncpg raises its own errors when a new connection fails (bad password, no db)
        import asyncpg
    except ImportError:
        return kinds
    return [*kinds, asyncpg.PostgresError]


# What API callers are told (the database's address and the remedy go to the manager's log).
_DATABASE_ANSWER = {
    "locked": "the manager's database is locked by another program",
    "full": "the manager's database has no space left (nothing was changed)",
    "unreachable": "the manager's database does not answer",
    "readonly": "the manager's database cannot be written",
}
