"""The agent's line to the manager: it dials out (so nodes behind NAT work) over the REST API.

The node's credential, got once with a join token, is kept in ``<data_dir>/credential.json``
(mode 0600), so a restarted agent is the same node and re-reports what it still runs. A file
written before the wire counted milliseconds (``heartbeat_interval`` in seconds) is still read,
and written again in the current form: an agent must not need a new join token to upgrade.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import BaseModel

from gpuslice.agent.config import AgentSettings
from gpuslice.common.schemas.agents import (
    Answer,
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
M = TypeVar("M", bound=BaseModel)


class LinkError(RuntimeError):
    """The manager refused a call (``status`` set) or could not be reached (``status`` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotRegistered(LinkError):
    """This node has no valid credential and no join token to get one."""


class VersionMismatch(LinkError):
    """The manager speaks another API revision than this agent (the message names both)."""


@dataclass(frozen=True, slots=True)
class Credential:
    manager_url: str
    node_id: str
    secret: str
    heartbeat_interval_ms: int


def registration(settings: AgentSettings) -> NodeRegister | None:
    """What the node registers with: its join token, name and fGPU per GPU (milli-fGPU, as
    the settings hold it); ``None`` without a join token (a stored credential must do)."""
    if settings.join_token is None:
        return None
    return NodeRegister(
        join_token=settings.join_token.get_secret_value(),
        name=settings.node_name,
        device_capacity=settings.fgpu_per_gpu,
    )


class ManagerLink:
    """Typed calls to the manager's agent API, authenticated as this node."""

    def __init__(
        self,
        manager_url: str,
        data_dir: Path,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.manager_url = manager_url.rstrip("/")
        self.data_dir = data_dir
        self.credential: Credential | None = None
        self._http = httpx.AsyncClient(
            base_url=self.manager_url, timeout=timeout, transport=transport
        )

    async def close(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------ identity

    async def connect(self, body: NodeRegister | None) -> Credential:
        """Use the stored credential for this manager, or register with the join token."""
        stored = self._load()
        if stored is not None and stored.manager_url == self.manager_url:
            self.credential = stored
            return stored
        damaged = stored is None and (self.data_dir / CREDENTIAL_FILE).exists()
        if body is None:
            what = (f"its credential file {self.data_dir / CREDENTIAL_FILE} is damaged"
                    if damaged else f"this node is not registered with {self.manager_url}")
            raise NotRegistered(
                f"{what}: give it a join token (GPUSLICE_AGENT_JOIN_TOKEN; an admin makes one: "
                "`gpuslice admin token create`)"
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

    async def assignments(self, since: int | None, wait: float) -> Assignments:
        params: dict[str, float | int] = {"wait": wait}
        if since is not None:
            params["since"] = since
        return await self._request(  # type: ignore[return-value]
            "GET",
            f"{API}/me/assignments",
            Assignments,
            params=params,
            timeout=httpx.Timeout(10.0, read=wait + 15.0),
        )

    async def report(self, session_id: str, report: StateReport) -> str:
        answer = await self._request(
            "POST",
            f"{API}/me/sessions/{session_id}/state",
            None,
            content=report.model_dump_json(),
        )
        return str(answer.get("status", "")) if isinstance(answer, dict) else ""

    async def answer(self, request_id: str, answer: Answer) -> None:
        """Answer one request (any kind). 404: the manager no longer awaits it (expired,
        answered, or not this node's); 422: the answer's kind is not the request's."""
        await self._request(
            "PUT", f"{API}/me/requests/{request_id}", None, content=answer.model_dump_json()
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

    # ------------------------------------------------------------ plumbing

    async def _post(self, path: str, body: BaseModel, model: type[M], *, auth: bool = True) -> M:
        answer = await self._request(
            "POST", path, model, content=body.model_dump_json(), auth=auth
        )
        return answer  # type: ignore[return-value]

    async def _request(
        self, method: str, path: str, model: type[BaseModel] | None, *, auth: bool = True,
        **kw: object
    ) -> object:
        headers = {"Content-Type": "application/json"}
        if auth:
            if self.credential is None:
                raise NotRegistered("not connected to the manager")
            headers["Authorization"] = f"Bearer {self.credential.secret}"
        try:
            response = await self._http.request(
                method,
                path,
                headers=headers,
                **kw,  # type: ignore[arg-type]
            )
        except httpx.TransportError as exc:
            raise LinkError(f"manager {self.manager_url} unreachable: {exc!r}") from None
        if API_HEADER in response.headers or response.is_success:
            problem = mismatch(response.headers, self.manager_url, agent=True)
            if problem is not None:
                raise VersionMismatch(problem, response.status_code)
        if response.status_code >= 400:
            raise LinkError(_message(response), response.status_code)
        if model is None:
            return response.json() if response.content else None
        return model.model_validate_json(response.content)

    def _load(self) -> Credential | None:
        path = self.data_dir / CREDENTIAL_FILE
        try:
            raw = json.loads(path.read_text())
            if "heartbeat_interval_ms" in raw:
                interval_ms = int(raw["heartbeat_interval_ms"])
            else:  # the seconds of a file from before the wire counted milliseconds
                interval_ms = round(float(raw["heartbeat_interval"]) * 1000)
            credential = Credential(raw["manager_url"], raw["node_id"], raw["secret"], interval_ms)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if "heartbeat_interval_ms" not in raw:
            self._save(credential)  # the old form is read once per node, never again
        return credential

    def _save(self, credential: Credential) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.data_dir / CREDENTIAL_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(
                {
                    "manager_url": credential.manager_url,
                    "node_id": credential.node_id,
                    "secret": credential.secret,
                    "heartbeat_interval_ms": credential.heartbeat_interval_ms,
                },
                out,
            )
        os.replace(tmp, path)


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and body.get("message"):
            return f"{body.get('code', 'error')}: {body['message']}"
    except ValueError:
        pass
    return f"HTTP {response.status_code}: {response.text[:200]}"
