"""The audit context of one request: who asks, from where, under which request id.

The middleware (``middleware.py``) makes one per request and keeps it in a context variable;
the authentication dependencies name the actor in it (``arm_user``, ``arm_node``); the
database hook (``record.py``) reads it when the request's transaction commits.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from gpuslice.common.schemas.users import USERNAME_PATTERN
from gpuslice.manager.services.audit import actions

#: A request id a client sends is kept when it matches this; otherwise a new one is made.
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(slots=True)
class AuditContext:
    """What the audit row of a request says, filled in as the request goes."""

    request_id: str
    method: str
    source_ip: str | None
    user_agent: str | None
    action: str | None = None  # set when the route is known (``actions.action_of``)
    quiet: bool = True  # a success gets no row (reads, heartbeats); known once routed
    actor_type: str = "anonymous"
    actor_id: str | None = None
    actor_name: str | None = None
    via: str | None = None
    token_id: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    reason: str | None = None  # the error code of a refusal
    armed: bool = False  # an actor is known: the transaction that writes carries the row
    recorded: bool = False  # the request's row is written (or on its way in a commit)
    finished: bool = False  # the answer was given: the middleware wrote what it had to
    body: bytearray = field(default_factory=bytearray)  # its start: the fields it names
    details: dict[str, Any] = field(default_factory=dict)
    scope: Any = None  # the ASGI scope: its route names the action once routed
    named: bool = False  # action, target and quiet are set from the route

    def name(self) -> None:
        """The action and target, from the route the request was sent to (once routed)."""
        if self.named:
            return
        route = (self.scope or {}).get("route")
        template = getattr(route, "path_format", None) or getattr(route, "path", None)
        if template is None:
            return
        self.named = True
        self.action = self.action or actions.action_of(self.method, template)
        self.quiet = actions.quiet(self.method, template)
        if self.target_type is None:
            params = self.scope.get("path_params") or {}
            self.target_type, self.target_id = actions.target_of(
                template, {k: str(v) for k, v in params.items()})


_CURRENT: ContextVar[AuditContext | None] = ContextVar("gpuslice_audit", default=None)


def current() -> AuditContext | None:
    """The audit context of the request being served (None outside requests: loops)."""
    return _CURRENT.get()


def enter(ctx: AuditContext) -> Any:
    return _CURRENT.set(ctx)


def leave(token: Any) -> None:
    _CURRENT.reset(token)


def request_id(given: str | None) -> str:
    """The client's ``X-Request-Id`` when it is one we may echo and store, else a new one."""
    if given is not None and REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def arm_user(user_id: str, username: str, via: str, token_id: str | None) -> None:
    """The request is made by this user (with this kind of credential)."""
    ctx = current()
    if ctx is None:
        return
    ctx.name()
    ctx.actor_type, ctx.actor_id, ctx.actor_name = "user", user_id, username
    ctx.via, ctx.token_id = via, token_id
    ctx.armed = ctx.method in MUTATING and not ctx.quiet


def arm_node(node_id: str) -> None:
    """The request is made by a node's agent."""
    ctx = current()
    if ctx is None:
        return
    ctx.name()
    ctx.actor_type, ctx.actor_id, ctx.via = "node", node_id, "node"
    ctx.armed = ctx.method in MUTATING and not ctx.quiet


def rejected(user_id: str, username: str, via: str, token_id: str, reason: str) -> None:
    """A known token was presented but may no longer be used (revoked, expired, inactive)."""
    ctx = current()
    if ctx is None:
        return
    ctx.actor_type, ctx.actor_id, ctx.actor_name = "user", user_id, username
    ctx.via, ctx.token_id, ctx.reason = via, token_id, reason
    ctx.action = "auth.token_rejected"


def refused(code: str) -> None:
    """The error code the request is answered with (the reason of its row)."""
    ctx = current()
    if ctx is not None and ctx.reason is None:
        ctx.reason = code


def attempted(username: str) -> None:
    """A login names this user (a failed one stores the name only when it could be one)."""
    ctx = current()
    if ctx is not None:
        ctx.actor_name = username if _USERNAME.match(username) else (
            f"(invalid, {len(username)} chars)")


def note(**details: Any) -> None:
    """What changed, in the request's row (counts, names; never secrets)."""
    ctx = current()
    if ctx is not None:
        ctx.details.update(details)


_USERNAME = re.compile(USERNAME_PATTERN)
