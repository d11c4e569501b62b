"""An in-process node agent for tests: speaks the agent API, runs nothing.

It registers with a join token, sends heartbeats, follows its assignments by long-poll, reports
PREPARING then RUNNING for new sessions and TERMINATED (with its last output) for sessions to
stop, and answers the requests that come with its assignments (logs, exec, commit, apps). Given
the manager's WebSocket address (``ws_url``: a real server), it dials stream links back and
plays the apps on them (``fake_streams.py``). The only fake in the manager's tests (there is no
container runtime here).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import httpx

GiB = 1024**3
ExecAnswer = Callable[[dict[str, Any]], dict[str, Any]]


def echo(request: dict[str, Any]) -> dict[str, Any]:
    """The default exec answer: what ran where, and the exit code 0."""
    ask = request["ask"]
    return {
        "exit_code": 0, "stdout": " ".join(ask["command"]) + "\n",
        "stderr": f"in {request['session_id']} within {ask['timeout_ms'] / 1000:g}s\n",
    }


def ready_apps(request: dict[str, Any]) -> dict[str, Any]:
    """The default apps answer: every app ready."""
    return {"apps": [{"name": a["name"], "state": "ready"} for a in request["ask"]["apps"]]}


def requests_of(answer: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The requests of one kind in an assignments answer."""
    return [r for r in answer["requests"] if r["ask"]["kind"] == kind]


def gpu(index: int, model: str = "Mock A100", mem: int = 40 * GiB) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-mock-{index}", "model": model, "mem": mem, "sms": 108}


class FakeAgent:
    def __init__(
        self,
        client: httpx.AsyncClient,
        join_token: str,
        name: str,
        *,
        devices: list[dict[str, Any]] | None = None,
        cpu: int = 64_000,
        mem: int = 256 * GiB,
        images: list[str] | None = None,
        image_details: list[dict[str, Any]] | None = None,
        fgpu_per_gpu: float | None = None,
        auto_run: bool = True,
        exec_answer: ExecAnswer = echo,
        ws_url: str | None = None,
        apps_answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        pool: str | None = None,
        poll_wait: float = 5,
    ) -> None:
        self.pool = pool  # its resource group (None: the manager's default)
        self.poll_wait = poll_wait  # seconds its long-poll asks the manager to wait at most
        self.client = client
        self.join_token = join_token
        self.name = name
        self.devices = devices if devices is not None else [gpu(0)]
        self.cpu, self.mem = cpu, mem
        self.images = images or ["python:3.11"]
        self.image_details = image_details  # [{tag, image_id, size, labels}]: sent when given
        self.fgpu_per_gpu = fgpu_per_gpu
        self.auto_run = auto_run
        self.exec_answer = exec_answer
        self.executed: list[str] = []  # exec request ids, in the order run
        self.signals: list[tuple[str, str]] = []  # (session id, signal), in the order sent
        self.committed: list[dict[str, Any]] = []  # commit requests, in the order done
        self.commit_error = ""  # answer commit requests with this error when set
        self.node_id = ""
        self.usage: dict[str, dict[str, Any]] = {}  # session id -> its sample (SessionUsage)
        self.credential = ""
        self.ws_url = ws_url  # where to dial stream links back (None: never)
        self.apps_answer = apps_answer or ready_apps
        self.links: list[dict[str, Any]] = []  # stream requests dialled back for
        self.opened: list[dict[str, Any]] = []  # what the manager opened on those links
        self.assignments: dict[str, dict[str, Any]] = {}  # the latest, by session
        self._link_tasks: set[asyncio.Task[None]] = set()
        self.running: set[str] = set()
        self.seen: list[dict[str, Any]] = []  # every assignments answer
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.last_report: dict[str, Any] = {}  # the last heartbeat's body

    async def start(self) -> None:
        body: dict[str, Any] = {"join_token": self.join_token, "name": self.name}
        if self.pool is not None:
            body["pool"] = self.pool
        if self.fgpu_per_gpu is not None:  # the wire's unit: one GPU in milli-fGPU
            body["device_capacity"] = round(self.fgpu_per_gpu * 1000)
        r = await self.client.post("/api/v1/agents/register", json=body)
        r.raise_for_status()
        self.node_id = r.json()["node_id"]
        self.credential = r.json()["credential"]
        self.client.headers["Authorization"] = f"Bearer {self.credential}"
        await self.heartbeat()
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        for task in list(self._link_tasks):
            task.cancel()
        await asyncio.gather(*self._link_tasks, return_exceptions=True)
        self._stopping = True
        if self._task is not None:
            # Cancelled again until it ends: the cancel can land on a wait inside the app
            # (the app runs in this task) that swallows it; the loop then ends at its next turn.
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1)
            # a test that revoked or re-keyed this node has seen its loop end with a 401
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPStatusError):
                await self._task
        await self.client.aclose()

    async def heartbeat(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "cpu": self.cpu, "mem": self.mem, "devices": self.devices,
            "images": self.images, "running": sorted(self.running),
        }
        if self.image_details is not None:
            body["image_details"] = self.image_details
        if self.usage:
            body["usage"] = [{"session_id": sid, **sample} for sid, sample in self.usage.items()]
        r = await self.client.post("/api/v1/agents/me/heartbeat", json=body)
        r.raise_for_status()
        self.last_report = body
        return r.json()

    async def report(self, session_id: str, status: str, **extra: Any) -> httpx.Response:
        return await self.client.post(
            f"/api/v1/agents/me/sessions/{session_id}/state", json={"status": status, **extra}
        )

    async def answer(self, request_id: str, kind: str, body: dict[str, Any]) -> httpx.Response:
        return await self.client.put(
            f"/api/v1/agents/me/requests/{request_id}", json={"kind": kind, **body}
        )

    async def answer_exec(self, request_id: str, body: dict[str, Any]) -> httpx.Response:
        return await self.answer(request_id, "exec", body)

    async def _follow(self) -> None:
        version: int | None = None
        while not self._stopping:
            params: dict[str, Any] = {"wait": self.poll_wait}
            if version is not None:
                params["since"] = version
            r = await self.client.get("/api/v1/agents/me/assignments", params=params)
            r.raise_for_status()
            answer = r.json()
            self.seen.append(answer)
            version = answer["version"]
            if self.auto_run:
                await self._reconcile(answer)

    async def _reconcile(self, answer: dict[str, Any]) -> None:
        for item in answer["sessions"]:
            sid = item["session_id"]
            self.assignments[sid] = item
            if item["desired"] == "stopped":
                self.running.discard(sid)
                await self.report(sid, "TERMINATED", reason="stopped", logs=f"bye from {sid}\n")
            elif item["status"] == "SCHEDULED":
                await self.report(sid, "PREPARING")
                self.running.add(sid)
                await self.report(sid, "RUNNING")
        for req in requests_of(answer, "logs"):
            await self.answer(req["id"], "logs", {
                "logs": f"hello from {req['session_id']} (tail {req['ask']['tail']})\n"
            })
        for req in requests_of(answer, "commit"):
            if all(req["id"] != done["id"] for done in self.committed):
                self.committed.append(req)
                await self._commit(req)
        for req in requests_of(answer, "exec"):
            if req["id"] not in self.executed:
                self.executed.append(req["id"])
                await self.answer_exec(req["id"], self.exec_answer(req))
        for req in requests_of(answer, "apps"):
            await self.answer(req["id"], "apps", self.apps_answer(req))
        for req in requests_of(answer, "signal"):
            self.signals.append((req["session_id"], req["ask"]["signal"]))
            await self.answer(req["id"], "signal", {})
        for req in requests_of(answer, "stream"):
            self.links.append(req)
            if self.ws_url is not None:
                from tests.manager.fake_streams import serve_link

                task = asyncio.create_task(serve_link(self, req))
                self._link_tasks.add(task)
                task.add_done_callback(self._link_tasks.discard)

    async def _commit(self, req: dict[str, Any]) -> None:
        ask = req["ask"]
        if self.commit_error:
            body: dict[str, Any] = {"error": self.commit_error}
        else:  # the new image is on this node from now on, with the labels asked for
            image_id = f"sha256:{len(self.committed):064x}"
            body = {"image_id": image_id, "size": 5 * 1024**2, "labels": ask["labels"]}
            self.images = [*self.images, ask["reference"]]
            if self.image_details is not None:
                self.image_details = [
                    *self.image_details, {"tag": ask["reference"], **body}
                ]
        r = await self.answer(req["id"], "commit", body)
        r.raise_for_status()
