"""The API's edge: every request under ``/api/`` passes here once, before routing and before any
dependency (authentication included) runs.

- **Body size**: a body larger than ``limits.max_body`` is a 413 before it is parsed (from its
  ``Content-Length`` when it has one, else as soon as the count passes the limit), for anonymous
  callers too. A route opts into more with :func:`node_body` (node agents' reports and answers:
  ``limits.max_node_body``, only for requests that carry a bearer token) or out of buffering
  with :func:`streamed_body` or ``openapi_extra={STREAMED_EXTRA: True}`` (uploads: the route
  reads ``request.stream()`` and bounds it).
- **Text and numbers**, the rule of ``common/text.py``: every string of a JSON body (keys
  included), every query and path parameter and every header the route declares must be text
  (no lone surrogate, no NUL, control characters only where they make sense), parameters at
  most ``limits.max_param`` characters; every JSON number and every integer parameter must fit
  a signed 64-bit integer (what a database column holds) and be finite; JSON nests at most
  ``limits.max_json_depth`` levels. Anything else is a 422 ``validation_error`` naming the field.

Schemas and routes need nothing special to get this: a new route is covered as it is added.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuslice.common import text
from gpuslice.common.schemas.errors import ErrorBody
from gpuslice.manager.settings import LimitsSettings

F = TypeVar("F", bound=Callable[..., Any])
_BODY = "__gpuslice_body__"
_JSON_TYPES = ("application/json",)
#: The OpenAPI mark of a route whose body is streamed (same as :func:`streamed_body`).
STREAMED_EXTRA = "x-gpuslice-streamed-body"


def node_body(handler: F) -> F:
    """Mark a route whose callers (node agents, with a bearer token) may send up to
    ``limits.max_node_body`` bytes: heartbeats, state reports with logs, request answers."""
    setattr(handler, _BODY, "node")
    return handler


def streamed_body(handler: F) -> F:
    """Mark a route that reads its body itself as a stream (an upload to disk): the edge
    neither buffers nor checks it; the route bounds what it reads."""
    setattr(handler, _BODY, "stream")
    return handler


class Refused(Exception):
    """A request the edge answers itself: status, field and message (and headers)."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers or {}


#: A check that refuses some requests before they are read (e.g. an address flooding logins).
Gate = Callable[[Scope], Refused | None]


@dataclass(frozen=True, slots=True)
class _Route:
    """What the edge needs to know of one API route."""

    methods: frozenset[str]
    regex: re.Pattern[str]
    body: str  # "default" | "node" | "stream"
    int_query: frozenset[str]
    headers: dict[str, bool]  # declared header (lower case) -> is an integer

    @classmethod
    def of(cls, prefix: str, route: APIRoute) -> _Route:
        query, headers = _declared(route.dependant)
        regex, _format, _convertors = compile_path(prefix + route.path)
        return cls(
            methods=frozenset(route.methods or ()), regex=regex,
            body=getattr(route.endpoint, _BODY, None)
            or ("stream" if (route.openapi_extra or {}).get(STREAMED_EXTRA) else "default"),
            int_query=frozenset(f.alias for f in query if _is_int(f)),
            headers={f.alias.replace("_", "-").lower(): _is_int(f) for f in headers},
        )


_UNKNOWN = _Route(frozenset(), re.compile("$^"), "default", frozenset(), {})


class Edge:
    """ASGI middleware: see the module docstring. ``routers``: ``(prefix, router)`` of every
    API router the app includes (``create_app`` passes the same list it includes), so the edge
    knows each route's parameters and body kind before the app routes the request."""

    def __init__(
        self,
        app: ASGIApp,
        limits: LimitsSettings,
        routers: Sequence[tuple[str, APIRouter]],
        node_credential: Callable[[Scope, str], Awaitable[bool]] | None = None,
        gate: Gate | None = None,
        prefix: str = "/api/",
    ) -> None:
        self.app = app
        self.limits = limits
        self.prefix = prefix
        self.node_credential = node_credential
        self.gate = gate
        self.routes = [_Route.of(p, r) for p, router in routers for r in router.routes
                       if isinstance(r, APIRoute)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        try:
            refused = self.gate(scope) if self.gate is not None else None
            if refused is not None:
                raise refused
            route, path_params = self._route(scope)
            self._check_params(scope, route, path_params)
            if route.body == "stream":
                await self.app(scope, receive, send)
                return
            body = await self._read(scope, receive, route)
            if body:
                _check_json(scope, body, self.limits.max_json_depth)
        except Refused as refused:
            await _answer(send, refused)
            return
        await self.app(scope, _replay(body, receive), send)

    def _route(self, scope: Scope) -> tuple[_Route, dict[str, str]]:
        """The route the app will send this request to, and its path parameters."""
        path = scope["path"]
        other_method: tuple[_Route, dict[str, str]] | None = None
        for route in self.routes:
            match = route.regex.match(path)
            if match is None:
                continue
            if scope["method"] in route.methods:
                return route, match.groupdict()
            other_method = other_method or (route, match.groupdict())
        return other_method or (_UNKNOWN, {})

    async def _read(self, scope: Scope, receive: Receive, route: _Route) -> bytes:
        """The body, at most ``max_body`` bytes, or ``max_node_body`` on a node route whose
        caller proves to be a node (checked only once the body passes ``max_body``)."""
        limit, raised = self.limits.max_body, False
        declared = _header(scope, b"content-length")
        if declared.isdigit() and int(declared) > limit:
            raised = await self._may_send_more(scope, route)
            limit = self.limits.max_node_body if raised else limit
            if int(declared) > limit:
                raise _too_large(scope, limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit and not raised:
                raised = await self._may_send_more(scope, route)
                limit = self.limits.max_node_body if raised else limit
            if size > limit:
                raise _too_large(scope, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _may_send_more(self, scope: Scope, route: _Route) -> bool:
        secret = _header(scope, b"authorization").removeprefix("Bearer ").strip()
        if route.body != "node" or not secret or self.node_credential is None:
            return False
        return await self.node_credential(scope, secret)

    # ------------------------------------------------------------ parameters

    def _check_params(self, scope: Scope, plan: _Route, path: dict[str, str]) -> None:
        for name, value in path.items():
            self._check_param(name, str(value), integer=False)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        for name, value in query:
            self._check_param(name, value, integer=name in plan.int_query)
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1").lower()
            if name in plan.headers:
                self._check_param(name, raw_value.decode("latin-1"), integer=plan.headers[name])

    def _check_param(self, name: str, value: str, *, integer: bool) -> None:
        found = text.problem(value, line=True)
        if found is None and len(value) > self.limits.max_param:
            found = f"is {len(value)} characters long; at most {self.limits.max_param} allowed"
        if found is None and integer:
            found = _int_problem(value)
        if found is not None:
            raise Refused(422, "validation_error", f"{name}: {found}", name)


# ------------------------------------------------------------------ helpers


def _declared(dependant: Any) -> tuple[list[Any], list[Any]]:
    """The query and header parameters a route and its dependencies declare."""
    query: list[Any] = []
    headers: list[Any] = []
    seen: set[int] = set()
    todo = [dependant]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        query += current.query_params
        headers += current.header_params
        todo += current.dependencies
    return query, headers


def _is_int(field: Any) -> bool:
    return _mentions_int(field.field_info.annotation)


def _mentions_int(annotation: Any) -> bool:
    if annotation is int:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _mentions_int(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, set, tuple, frozenset):
        return any(_mentions_int(arg) for arg in typing.get_args(annotation))
    return False


def _int_problem(value: str) -> str | None:
    try:
        number = int(value.strip())
    except ValueError:
        return None  # not an integer at all: the route's own validation says so
    return _out_of_range(number)


def _out_of_range(number: int) -> str | None:
    if text.INT64_MIN <= number <= text.INT64_MAX:
        return None
    shown = str(number) if len(str(number)) <= 40 else f"{str(number)[:20]}…"
    return f"{shown} is out of range (a 64-bit integer: at most {text.INT64_MAX})"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return ""


def _too_large(scope: Scope, limit: int) -> Refused:
    return Refused(413, "too_large", f"the request body is larger than {_size(limit)}, the "
                   f"limit of {scope['method']} {scope['path']}")


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _check_json(scope: Scope, body: bytes, max_depth: int) -> None:
    kind = _header(scope, b"content-type").split(";", 1)[0].strip().lower()
    if kind and kind not in _JSON_TYPES and not kind.endswith("+json"):
        return  # not JSON: the route's own parser (form, bytes) deals with it
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise Refused(422, "validation_error", "body: not valid UTF-8") from None
    except RecursionError:
        raise Refused(422, "validation_error",
                      f"body: nested deeper than {max_depth} levels") from None
    except ValueError as err:  # JSONDecodeError, a 4300-digit integer, NaN / Infinity
        raise Refused(422, "validation_error", f"body: not valid JSON: {err}") from None
    found = _json_problem(value, (), max_depth)
    if found is not None:
        where, what = found
        field = ".".join(where) or None
        raise Refused(422, "validation_error", f"{field or 'body'}: {what}", field)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


Problem = tuple[tuple[str, ...], str]  # where (the path of keys), what


def _json_problem(value: Any, where: tuple[str, ...], depth: int) -> Problem | None:
    if isinstance(value, dict | list):
        return _container_problem(value, where, depth)
    what = _scalar_problem(value)
    return None if what is None else (where, what)


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return text.problem(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return _out_of_range(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    return None


def _container_problem(value: Any, where: tuple[str, ...], depth: int) -> Problem | None:
    if depth <= 0:
        return where, "is nested too deeply"
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        inside = (*where, str(key))
        if isinstance(key, str) and (bad_key := text.problem(key, line=True)) is not None:
            return inside, f"(a key) {bad_key}"
        found = _json_problem(item, inside, depth - 1)
        if found is not None:
            return found
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later: the client's disconnect (long-polls watch for it)

    return replay


async def _answer(send: Send, refused: Refused) -> None:
    body = ErrorBody(
        code=refused.code, message=text.scrub(refused.message), field=text.scrub(refused.field)
    ).model_dump_json().encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in refused.headers.items()]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
