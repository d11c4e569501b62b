"""The agent's line to the manager: it dials out (so nodes behind NAT work) over the REST API.

The node's credential, got once with a join token, is kept in ``<data_dir>/credential.json``
(mode 0600), so a restarted agent is the same node and re-reports what it still runs. A file
written before the wire counted milliseconds (``heartbeat_interval`` in seconds) is still read,
and written again in the current form: an agent must not need a new join token to upgrade.

**Several managers.** The link knows every replica's URL (``manager_url`` may list several) and
sends each call to one of them, the *current* one. When a call cannot reach it (connection
refused or reset, timeout) or a load balancer in front answers 502/503, the call fails as usual
(the agent's loops retry it) and the link moves on to the next URL, once per failure of the
current one: two loops failing together do not skip a replica. Every call is idempotent, so
retrying on another replica is safe. The credential belongs to the cluster: it is used with any
of the URLs it was stored with, so adding a replica to the list needs no new join token.
A request that names a replica (a stream the manager asks for, whose user waits on one replica)
is dialled at that replica's URL, whatever the current one: see `auth_headers`.

**In one process** (`gpuslice up`: the manager and its local agent), the calls go straight to
the manager's app (`InProcess`), not through a socket: the same requests, routes, checks and
answers, without each call's HTTP encoding, loopback and parsing on both sides (under
bench/throughput.py, a sixth of that process's CPU, which Docker needed). Streams the manager
asks for are still dialled at its URL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp

from gpuslice.agent.settings import AgentSettings
from gpuslice.common import text
from gpuslice.common.schemas.agents import (
    AgentRequest,
    Answer,
    Assignment,
    Assignments,
    Heartbeat,
    HeartbeatAck,
    NodeRegister,
    NodeRegistered,
    StateReport,
)
from gpuslice.common.versions import API_HEADER, mismatch

log = logging.getLogger(__name__)
API = "/api/v1/agents"
CREDENTIAL_FILE = "credential.json"
STREAM_TIMEOUT = 300.0  # seconds a streamed call may wait for the next piece either way
M = TypeVar("M", bound=BaseModel)


class LinkError(RuntimeError):
    """The manager refused a call (``status`` set) or could not be reached (``status`` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotRegistered(LinkError):
    """This node has no valid credential and no join token to get one."""


# Answers of a load balancer whose backend is gone: another replica may do better.
FAIL_OVER_STATUS = frozenset({502, 503})


class VersionMismatch(LinkError):
    """The manager speaks another API revision than this agent (the message names both)."""


@dataclass(frozen=True, slots=True)
class Credential:
    manager_url: str  # the replica it was got from
    node_id: str
    secret: str
    heartbeat_interval_ms: int
    manager_urls: tuple[str, ...] = field(default=())  # every replica it may be used with

    def usable_with(self, urls: Sequence[str]) -> bool:
        return bool({self.manager_url, *self.manager_urls} & set(urls))


def registration(settings: AgentSettings, agent_id: str | None = None) -> NodeRegister | None:
    """What the node registers with: its join token, name, fGPU per GPU (milli-fGPU, as
    the settings hold it) and the agent's id (``agent/identity.py``); ``None`` without a join
    token (a stored credential must do)."""
    if settings.join_token is None:
        return None
    return NodeRegister(
        join_token=settings.join_token.get_secret_value(),
        name=settings.node_name,
        device_capacity=settings.fgpu_per_gpu,
        agent_id=agent_id,
        pool=settings.resource_group,
    )


class InProcess(httpx.AsyncBaseTransport):
    """Calls answered by the manager's ASGI app in this process, with a socket's read timeout:
    a call the app does not answer within it fails as a timeout (the link's callers retry it);
    a streamed body (a model's file) renews it with each piece the app takes, so a long
    upload that keeps moving is not cut. An error the app raises is its 500, as over HTTP."""

    def __init__(self, app: ASGIApp) -> None:
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        limit = (request.extensions.get("timeout") or {}).get("read")
        if limit is None:
            return await self._asgi.handle_async_request(request)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limit) as deadline:
                stream = request.stream  # bytes known in full (ByteStream) need no renewal
                if isinstance(stream, httpx.AsyncByteStream) and not isinstance(
                        stream, httpx.ByteStream):
                    request.stream = _Renewing(
                        stream, lambda: deadline.reschedule(loop.time() + limit))
                return await self._asgi.handle_async_request(request)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer in {limit} s", request=request) from None


class _Renewing(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, renew: Callable[[], None]) -> None:
        self._stream, self._renew = stream, renew

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._stream:
            self._renew()
            yield piece


class ManagerLink:
    """Typed calls to the manager's agent API, authenticated as this node, on one of its
    replicas (``manager_urls``: one URL, a comma-separated list or a sequence)."""

    def __init__(
        self,
        manager_urls: str | Sequence[str],
        data_dir: Path,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | str | bool = True,
    ) -> None:
        items = manager_urls.split(",") if isinstance(manager_urls, str) else manager_urls
        self.urls = list(dict.fromkeys(u.strip().rstrip("/") for u in items if u.strip()))
        if not self.urls:
            raise ValueError("ManagerLink needs at least one manager URL")
        self._current = 0
        self.data_dir = data_dir
        self.credential: Credential | None = None
        # One client for every replica: the same certificate checks (``verify``: a CA bundle
        # path or context) whichever replica a call goes to after a failover.
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport, verify=verify)

    @property
    def manager_url(self) -> str:
        """The replica calls go to now."""
        return self.urls[self._current]

    def auth_headers(self) -> dict[str, str]:
        """What authenticates this node to any replica (for a call dialled at a URL of the
        manager's choosing, e.g. a stream's dial-back to the replica that holds its user)."""
        if self.credential is None:
            raise NotRegistered("not connected to the manager")
        return {"Authorization": f"Bearer {self.credential.secret}"}

    async def close(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------ identity

    async def connect(self, body: NodeRegister | None) -> Credential:
        """Use the stored credential for these managers, or register with the join token."""
        stored = self._load()
        if stored is not None and stored.usable_with(self.urls):
            self.credential = stored
            if not set(self.urls) <= {stored.manager_url, *stored.manager_urls}:
                self._save(stored)  # remember the replicas added since
            return self.credential
        damaged = stored is None and (self.data_dir / CREDENTIAL_FILE).exists()
        if body is None:
            if damaged:  # the node is registered: only a re-key token may replace its secret
                raise NotRegistered(
                    f"its credential file {self.data_dir / CREDENTIAL_FILE} is damaged: give it "
                    "a re-key token (GPUSLICE_AGENT_JOIN_TOKEN; an admin makes one: `gpuslice "
                    "node rekey NODE`)"
                )
            raise NotRegistered(
                f"this node is not registered with {', '.join(self.urls)}: give it a join token "
                "(GPUSLICE_AGENT_JOIN_TOKEN; an admin makes one: `gpuslice admin token create`)"
            )
        if damaged:
            log.warning("the node credential file %s is damaged; registering again with the "
                        "join token", self.data_dir / CREDENTIAL_FILE)
        answer = await self._post(f"{API}/register", body, NodeRegistered, auth=False)
        self.credential = Credential(
            self.manager_url, answer.node_id, answer.credential, answer.heartbeat_interval_ms
        )
        self._save(self.credential)
        return self.credential

    def forget(self) -> None:
        """Drop a credential the manager no longer accepts."""
        self.credential = None
        (self.data_dir / CREDENTIAL_FILE).unlink(missing_ok=True)

    # ------------------------------------------------------------ calls

    async def heartbeat(self, body: Heartbeat) -> HeartbeatAck:
        return await self._post(f"{API}/me/heartbeat", body, HeartbeatAck)

    async def assignments(
        self, since: int | None, wait: float
    ) -> tuple[Assignments, list[Unreadable]]:
        """The node's assignments, and the sessions among them this agent cannot read (left
        out: one bad session must not stop the node's others; the caller reports them)."""
        params: dict[str, float | int] = {"wait": wait}
        if since is not None:
            params["since"] = since
        raw = await self._request(
            "GET",
            f"{API}/me/assignments",
            None,
            params=params,
            timeout=httpx.Timeout(10.0, read=wait + 15.0),
        )
        if not isinstance(raw, dict):
            raise LinkError("the manager's assignments answer is not a JSON object")
        raw["requests"] = [r for r in raw.get("requests") or [] if _known_request(r)]
        return _assignments(raw)

    async def report(self, session_id: str, report: StateReport) -> str:
        answer = await self._request(
            "POST",
            f"{API}/me/sessions/{session_id}/state",
            None,
            content=_wire(report),
        )
        return str(answer.get("status", "")) if isinstance(answer, dict) else ""

    async def answer(self, request_id: str, answer: Answer) -> None:
        """Answer one request (any kind). 404: the manager no longer awaits it (expired,
        answered, or not this node's); 422: the answer's kind is not the request's."""
        await self._request(
            "PUT", f"{API}/me/requests/{request_id}", None, content=_wire(answer)
        )

    async def session_call(
        self, session_id: str, method: str, path: str, body: object = None
    ) -> object:
        """A call the in-session endpoint relays for one of this node's sessions:
        ``/api/v1/agents/me/sessions/<id>/<path>``, answered as JSON."""
        content = None if body is None else json.dumps(body)
        return await self._request(
            method, f"{API}/me/sessions/{session_id}/{path.lstrip('/')}", None, content=content
        )

    async def session_stream(
        self, session_id: str, method: str, path: str, params: Mapping[str, str],
        body: AsyncIterator[bytes], size: int,
    ) -> object:
        """A streamed call for one of this node's sessions (a file of a model being saved):
        ``body`` goes on to the manager as it comes, ``size`` bytes, never held whole."""
        if self.credential is None:
            raise NotRegistered("not connected to the manager")
        headers = {"Authorization": f"Bearer {self.credential.secret}",
                   "Content-Length": str(size), "Content-Type": "application/octet-stream"}
        base = self.manager_url
        url = f"{base}{API}/me/sessions/{session_id}/{path.lstrip('/')}"
        try:
            response = await self._http.request(
                method, url, params=dict(params), headers=headers, content=body,
                timeout=httpx.Timeout(30.0, read=STREAM_TIMEOUT, write=STREAM_TIMEOUT),
            )
        except httpx.TransportError as exc:
            self._fail_over(base, repr(exc))
            raise LinkError(f"manager {base} unreachable: {exc!r}") from None
        if response.status_code >= 400:
            if response.status_code in FAIL_OVER_STATUS:
                self._fail_over(base, f"HTTP {response.status_code}")
            raise LinkError(_message(response), response.status_code)
        return response.json() if response.content else None

    # ------------------------------------------------------------ plumbing

    async def _post(self, path: str, body: BaseModel, model: type[M], *, auth: bool = True) -> M:
        answer = await self._request(
            "POST", path, model, content=_wire(body), auth=auth
        )
        return answer  # type: ignore[return-value]

    async def _request(
        self, method: str, path: str, model: type[BaseModel] | None, *, auth: bool = True,
        **kw: object
    ) -> object:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers.update(self.auth_headers())
        url = self.manager_url
        try:
            response = await self._http.request(
                method,
                url + path,
                headers=headers,
                **kw,  # type: ignore[arg-type]
            )
        except httpx.TransportError as exc:
            self._fail_over(url, repr(exc))
            raise LinkError(f"manager {url} unreachable: {exc!r}") from None
        if API_HEADER in response.headers or response.is_success:
            problem = mismatch(response.headers, url, agent=True)
            if problem is not None:
                raise VersionMismatch(problem, response.status_code)
        if response.status_code >= 400:
            if response.status_code in FAIL_OVER_STATUS:
                self._fail_over(url, f"HTTP {response.status_code}")
            raise LinkError(_message(response), response.status_code)
        if model is None:
            return response.json() if response.content else None
        return model.model_validate_json(response.content)

    def _fail_over(self, failed: str, why: str) -> None:
        """Move to the next replica, unless another call already moved away from ``failed``."""
        if len(self.urls) < 2 or self.manager_url != failed:
            return
        self._current = (self._current + 1) % len(self.urls)
        log.warning("manager %s does not answer (%s); now using %s", failed, why,
                    self.manager_url)

    def _load(self) -> Credential | None:
        path = self.data_dir / CREDENTIAL_FILE
        try:
            raw = json.loads(path.read_text())
            if "heartbeat_interval_ms" in raw:
                interval_ms = int(raw["heartbeat_interval_ms"])
            else:  # the seconds of a file from before the wire counted milliseconds
                interval_ms = round(float(raw["heartbeat_interval"]) * 1000)
            credential = Credential(
                raw["manager_url"], raw["node_id"], raw["secret"], interval_ms,
                tuple(str(u) for u in raw.get("manager_urls", ())),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if "heartbeat_interval_ms" not in raw:
            self._save(credential)  # the old form is read once per node, never again
        return credential

    def _save(self, credential: Credential) -> None:
        known = tuple(dict.fromkeys([*credential.manager_urls, *self.urls]))
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.data_dir / CREDENTIAL_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(
                {
                    "manager_url": credential.manager_url,
                    "manager_urls": list(known),
                    "node_id": credential.node_id,
                    "secret": credential.secret,
                    "heartbeat_interval_ms": credential.heartbeat_interval_ms,
                },
                out,
            )
        os.replace(tmp, path)


def _known_request(raw: object) -> bool:
    try:
        AgentRequest.model_validate(raw)
    except ValidationError:
        ask = raw.get("ask") if isinstance(raw, dict) else None
        kind = ask.get("kind") if isinstance(ask, dict) else None
        request_id = raw.get("id") if isinstance(raw, dict) else None
        log.warning("request %s of kind %r is not one this agent serves (is the manager "
                    "newer?); skipped", request_id, kind)
        return False
    return True


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A session in the assignments that does not fit the wire's schema."""

    session_id: str
    reason: str


def _assignments(raw: object) -> tuple[Assignments, list[Unreadable]]:
    body = raw if isinstance(raw, dict) else {}
    sessions: list[Assignment] = []
    unreadable: list[Unreadable] = []
    for item in body.get("sessions") or []:
        try:
            sessions.append(Assignment.model_validate(item))
        except ValidationError as err:
            sid = item.get("session_id") if isinstance(item, dict) else None
            first = err.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            log.error("session %s: its assignment cannot be read (%s)", sid, where)
            if isinstance(sid, str) and sid:
                unreadable.append(Unreadable(sid, f"the node could not read its assignment "
                                                  f"({where}: {first.get('msg', 'invalid')})"))
    answer = Assignments.model_validate({**body, "sessions": []})
    answer.sessions = sessions
    return answer, unreadable


def _wire(body: BaseModel) -> str:
    """``body`` as JSON the manager accepts: what a container printed may hold NUL, stray
    control characters or undecodable bytes, which the manager's edge refuses; they become
    U+FFFD (``common/text.py``), the rest is sent as it is."""
    return json.dumps(text.clean_tree(body.model_dump(mode="json")))


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and body.get("message"):
            return f"{body.get('code', 'error')}: {body['message']}"
    except ValueError:
        pass
    return f"HTTP {response.status_code}: {response.text[:200]}"
