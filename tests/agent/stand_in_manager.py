"""The manager as the agent's tests stand it in, at the HTTP edge (an ``httpx.MockTransport``
under the real ``ManagerLink``): the agent API with one node and the state a test sets; a
session assigned as the manager would send it; a wait on the test's condition."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from gpuslice.agent.service import Agent
from gpuslice.common.resources import GiB, MiB, slice_fraction, sm_percent
from tests.waits import scaled

MANAGER = "http://manager.test"
API = "/api/v1/agents"


class StandInManager:
    """The agent API as the manager serves it, with one node and the state a test sets."""

    def __init__(self) -> None:
        self.version = 1
        self.sessions: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # delivered once, then gone
        self.registered: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[str, dict[str, Any]] = {}

    def change(self) -> None:
        self.version += 1

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path.removeprefix(API), request.method
        if (method, path) == ("POST", "/register"):
            self.registered.append(json.loads(request.content))
            return httpx.Response(200, json={"node_id": "n-1", "credential": "gsn_x",
                                             "heartbeat_interval_ms": 300})
        assert request.headers["Authorization"] == "Bearer gsn_x"
        if (method, path) == ("POST", "/me/heartbeat"):
            self.heartbeats.append(json.loads(request.content))
            return httpx.Response(200, json={"node_id": "n-1", "status": "ALIVE",
                                             "assignment_version": self.version})
        if (method, path) == ("GET", "/me/assignments"):
            return await self._assignments(request.url.params.get("since"))
        if method == "POST" and path.endswith("/state"):
            self.reports.append((path.split("/")[3], json.loads(request.content)))
            return httpx.Response(200, json={"status": "ok"})
        if method == "PUT" and path.startswith("/me/requests/"):
            self.answers[path.rsplit("/", 1)[1]] = json.loads(request.content)
            return httpx.Response(204)
        return httpx.Response(404, json={"code": "not_found", "message": path})

    async def _assignments(self, since: str | None) -> httpx.Response:
        for _ in range(20):  # a short long-poll: answer at once when the version moved
            if since != str(self.version):
                break
            await asyncio.sleep(0.05)
        requests, self.requests = self.requests, []
        return httpx.Response(200, json={"node_id": "n-1", "version": self.version,
                                         "sessions": self.sessions, "requests": requests})

    def statuses(self, session_id: str) -> list[str]:
        return [r["status"] for sid, r in self.reports if sid == session_id]

    def told_end_once(self, session_id: str) -> bool:
        """Its end told once: when its processes died (then its logs in a report of their
        own), or with its logs when the stop call returned first."""
        ends = [r.get("logs") is not None for sid, r in self.reports
                if sid == session_id and r["status"] == "TERMINATED"]
        return ends in ([False, True], [True])


async def until(check: Any, timeout: float = 30.0) -> None:
    """Wait until ``check()`` holds (a timeout error after ``timeout`` seconds, scaled)."""
    async with asyncio.timeout(scaled(timeout)):
        while not check():
            await asyncio.sleep(0.05)


def assignment(agent: Agent, image: str, session_id: str, **changes: Any) -> dict[str, Any]:
    assert agent.accelerator is not None  # the agent's, once it runs
    device = agent.accelerator.devices()[0]
    body = {
        "session_id": session_id, "name": "s", "owner": "alice", "image": image,
        "type": "interactive", "command": None, "env": {}, "status": "SCHEDULED",
        "desired": "running", "resources": {"gpu": 1000, "cpu": 500, "mem": 256 * MiB},
        "slices": [{
            "device_index": 0, "device_uuid": device.uuid, "gpu": 1000, "capacity": 3000,
            "fraction": str(slice_fraction(1000, 3000)), "mem": 4 * GiB, "sms": 12,
            "sm_percent": sm_percent(1000, 3000),
        }],
    }
    body.update(changes)
    return body
