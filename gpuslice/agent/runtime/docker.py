"""Session containers through the Docker Engine API (aiodocker), keyed by session id.

Every operation is idempotent and looks the container up by its labels first, so the runtime
keeps nothing in memory that matters: a fresh object on a restarted agent sees exactly what
the old one did. A session's container is named ``gpuslice-<session id>``, so even two agents
racing cannot create a second one: Docker refuses the name (409) and the loser adopts.

When dockerd goes away, calls raise :class:`DockerUnavailable` (after one quick retry for a
stale pooled connection); :meth:`DockerRuntime.events` reconnects by itself with backoff and
announces each (re)connection, and :meth:`DockerRuntime.wait_ready` waits for the engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import aiodocker
import aiohttp

from gpuslice.agent.identity import agent_id as stored_agent_id
from gpuslice.agent.runtime.engine import (
    CONNECTION_FAILED,
    container_logs,
    event_lines,
    one_shot_stats,
    parse_stats,
)
from gpuslice.agent.runtime.execs import ExecOps
from gpuslice.agent.runtime.image_ops import ImageOps
from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    ContainerState,
    ContainerStats,
    DockerUnavailable,
    ExecResult,
    ImageNotFound,
    RuntimeEvent,
    SessionNotFound,
)
from gpuslice.agent.runtime.networks import NetworkOps
from gpuslice.agent.runtime.node_files import make_host_dir, write_session_files
from gpuslice.agent.runtime.sandbox_ops import SandboxOps, SandboxUnusable
from gpuslice.agent.runtime.spec import (
    LABEL_AGENT_ID,
    LABEL_NODE,
    LABEL_SESSION,
    ContainerSpec,
    container_name,
)
from gpuslice.agent.settings import DEFAULT_DATA_DIR
from gpuslice.common.backoff import Backoff
from gpuslice.common.docker_engine import docker_client, explain

T = TypeVar("T")
_EVENTS = ("start", "die", "oom", "destroy")
_EXITED = re.compile(r"^Exited \((-?\d+)\)")
_CONNECTION_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError)


class DockerRuntime(ImageOps, ExecOps, NetworkOps, SandboxOps):
    """Runs a node's session containers. Use as ``async with DockerRuntime(node_name=...)``."""

    def __init__(
        self,
        *,
        node_name: str,
        files_root: Path = DEFAULT_DATA_DIR,
        docker_url: str | None = None,
        request_timeout: float = 60.0,
        agent_id: str | None = None,
    ) -> None:
        """``files_root``: a node directory (on dockerd's machine; the agent's ``data_dir``)
        for the files sessions see read-only, one subdirectory per session, removed with the
        session's container. ``agent_id``: the agent's own id, labelling every container it
        makes (default: the one kept in ``files_root``, ``agent/identity.py``)."""
        self.node_name = node_name
        self._agent_id = agent_id
        self.files_root = files_root
        self._url = docker_url
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=request_timeout
        )
        self._docker: aiodocker.Docker | None = None
        # network sandbox id -> its addresses: those of the session containers that joined it
        self.sandbox_addresses: dict[str, Mapping[str, str]] = {}

    async def __aenter__(self) -> DockerRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._docker is not None:
            docker, self._docker = self._docker, None
            await docker.close()

    @property
    def agent_id(self) -> str:
        """The agent's own id: read (or made) in ``files_root`` on first use."""
        if self._agent_id is None:
            self._agent_id = stored_agent_id(self.files_root)
        return self._agent_id

    # ------------------------------------------------------------------ engine

    async def ping(self) -> bool:
        """Whether the engine answers now."""
        return await self.problem() is None

    async def problem(self) -> str | None:
        """Why the engine does not answer now, in one line for a person (``None``: it does)."""
        try:
            await self._call(lambda d: d.version())
        except DockerUnavailable as err:
            return explain(err, self._url)
        return None

    async def engine_id(self) -> str:
        """The Docker Engine's own id (``docker info``): the same for every client of it."""
        info = await self._call(lambda d: d.system.info())
        return str(info.get("ID") or self._url or "local")

    async def wait_ready(self, timeout: float) -> None:
        """Wait (with backoff) until the engine answers; DockerUnavailable after ``timeout``."""
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self.ping():
            if loop.time() >= deadline:
                raise DockerUnavailable(f"Docker Engine did not answer within {timeout:.0f}s")
            await backoff.sleep()

    async def image_env(self, image: str) -> list[str]:
        """The image's ``Env``; :class:`ImageNotFound` if it is not on this node."""
        try:
            info = await self._call(lambda d: d.images.inspect(image))
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                raise ImageNotFound(image) from None
            raise
        return list((info.get("Config") or {}).get("Env") or [])

    async def has_image(self, image: str) -> bool:
        try:
            await self.image_env(image)
        except ImageNotFound:
            return False
        return True

    async def image_tags(self) -> list[str]:
        """Every tagged image on this node (``repo:tag``), for the manager's catalog."""
        images = await self._call(lambda d: d.images.list())
        return sorted({
            tag for image in images for tag in image.get("RepoTags") or ()
            if tag and tag != "<none>:<none>"
        })

    # ------------------------------------------------------------------ sessions

    async def ensure_running(self, spec: ContainerSpec) -> ContainerState:
        """Make the session's container exist and run; adopt one that already does.

        A finished batch container is left as it is (its exit code is the result: a batch
        never runs twice). A stopped interactive one is started again.
        """
        # Create first, and adopt on Docker's 409 (the name is the session's): a look before
        # would cost a listing on every start, and could not close the race anyway.
        state, fresh = await self._create(spec)  # writes the session's files
        if state.status == "created" or (state.finished and spec.session_type == "interactive"):
            if not fresh:
                await self._write_files(spec)  # the node's copy may be gone (wiped data dir)
                if state.sandbox:  # stopped with it (the Docker Engine restarted)
                    await self.wake_sandbox(state.sandbox)
            try:
                return await self._start(state)
            except ContainerRuntimeError as exc:
                if not (fresh and state.sandbox):
                    raise
                await self.remove_container(state.container_id)  # made by this call: unused
                raise SandboxUnusable(str(exc)) from exc
        return state

    async def find(self, session_id: str) -> ContainerState | None:
        """The session's container on this node, or ``None``."""
        found = await self._list({"label": [f"{LABEL_SESSION}={session_id}", self._node_label]})
        if not found:
            return None
        name = container_name(session_id)
        found.sort(key=lambda s: s.name != name)  # the named one first: it is the real one
        return found[0]

    async def inspect(self, container_id: str) -> ContainerState | None:
        """One container by id, or ``None`` when it is gone."""
        try:
            info = await self._call(lambda d: d.containers.container(container_id).show())
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise
        state = ContainerState.from_inspect(info)
        return self.with_sandbox_address(replace(state, owned=state.agent_id == self.agent_id))

    async def list_managed(self, busy: Collection[str] = ()) -> list[ContainerState]:
        """Every session container of this node's name, running or not, from Docker's labels.
        ``busy``: sessions whose stopped containers the caller leaves alone (a step of theirs
        runs): not inspected, so their exit code is unknown (``None``). Those of another agent
        id (another platform's, or made before agents had ids) are listed with ``owned``
        false: the caller adopts them only for sessions its manager gives it, and never
        removes one otherwise (``decide.py``)."""
        return await self._list({"label": [LABEL_SESSION, self._node_label]}, busy)

    async def stop(self, session_id: str, grace_s: int = 10) -> ContainerState | None:
        """SIGTERM, then SIGKILL after ``grace_s``. ``None`` when there is no container."""
        state = await self.find(session_id)
        if state is None:
            return None
        if state.running:
            await self.stop_container(state.container_id, grace_s)
        return await self.find(session_id)

    async def stop_container(self, container_id: str, grace_s: int = 10) -> None:
        """Stop one container by id (SIGTERM, SIGKILL after ``grace_s``); stopped or gone
        already is fine."""
        try:
            await self._call(lambda d: d.containers.container(container_id).stop(t=grace_s))
        except aiodocker.DockerError as exc:
            if exc.status not in (304, 404):  # already stopped / gone meanwhile
                raise

    async def signal(self, session_id: str, signal: str) -> None:
        """Send ``signal`` (``SIGUSR1``…) to the session's container: to its init, which hands
        it to the session's command. ``ContainerRuntimeError`` when it does not run."""
        state = await self.find(session_id)
        if state is None or not state.running:
            raise ContainerRuntimeError(f"session {session_id} has no running container")
        container_id = state.container_id
        await self._call(lambda d: d.containers.container(container_id).kill(signal=signal))

    async def remove(self, session_id: str, container_id: str | None = None) -> bool:
        """Remove the container (killing it if needed) and the session's files. ``False``
        when there was none. ``container_id``: the session's container as the caller just saw
        it (no look-up)."""
        if container_id is None:
            state = await self.find(session_id)
            if state is None:
                return False
            container_id = state.container_id
        await self.remove_container(container_id)
        await asyncio.to_thread(shutil.rmtree, self._files_dir(session_id), True)
        return True

    async def remove_container(self, container_id: str) -> None:
        """Remove one container by id (e.g. a stray duplicate), killing it if needed."""
        try:
            await self._call(
                lambda d: d.containers.container(container_id).delete(force=True, v=True)
            )
        except aiodocker.DockerError as exc:
            if exc.status not in (404, 409):  # gone, or removal already in progress
                raise

    async def prune_files(self, keep: Collection[str] = (), min_age_s: float = 60.0) -> list[str]:
        """Remove the node files of sessions that have no container any more.

        ``keep``: sessions being started now (their files exist before their container);
        files younger than ``min_age_s`` are kept too, so that a start racing the prune wins.
        """
        sessions = self.files_root / "sessions"
        if not sessions.is_dir():
            return []
        alive = {s.session_id for s in await self.list_managed()} | set(keep)
        young = time.time() - min_age_s
        pruned = sorted(
            p.name for p in sessions.iterdir()
            if p.name not in alive and p.stat().st_mtime < young
        )
        for name in pruned:
            await asyncio.to_thread(shutil.rmtree, sessions / name, True)
        return pruned

    async def logs(
        self, session_id: str, *, tail: int | None = None, container_id: str | None = None
    ) -> str:
        """stdout and stderr so far (the last ``tail`` lines), interleaved as written.
        ``container_id``: the session's container as the caller just saw it (no look-up)."""
        cid = container_id or (await self._container(session_id)).id
        try:
            return await self._call(lambda d: container_logs(d, cid, tail if tail else "all"))
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                raise SessionNotFound(session_id) from None
            raise

    async def follow_logs(self, session_id: str, *, tail: int | None = None) -> AsyncIterator[str]:
        """stdout and stderr as they are written; ends when the container stops."""
        container = await self._container(session_id)
        stream = container.log(stdout=True, stderr=True, follow=True, tail=tail if tail else "all")
        try:
            async for chunk in stream:
                yield chunk
        except _CONNECTION_ERRORS as exc:
            raise DockerUnavailable(f"log stream of {session_id} broke: {exc}") from exc

    async def exec(
        self,
        session_id: str,
        cmd: Sequence[str],
        *,
        user: str | None = None,
        timeout: float = 60.0,
    ) -> ExecResult:
        """Run ``cmd`` in the running session (as the session's user unless ``user``)."""
        container = await self._container(session_id)
        execution = await self._call(
            lambda d: container.exec(list(cmd), stdout=True, stderr=True, user=user or "")
        )
        out: list[bytes] = []
        err: list[bytes] = []
        async with asyncio.timeout(timeout):
            async with execution.start(detach=False) as stream:
                while (message := await stream.read_out()) is not None:
                    (err if message.stream == 2 else out).append(message.data)
            info = await self._call(lambda d: execution.inspect())
        return ExecResult(
            exit_code=int(info.get("ExitCode") or 0),
            stdout=b"".join(out).decode(errors="replace"),
            stderr=b"".join(err).decode(errors="replace"),
        )

    async def stats(self, session_id: str) -> ContainerStats | None:
        """One usage reading of a running session; ``None`` if it does not run."""
        state = await self.find(session_id)
        if state is None or state.status != "running":
            return None
        raw = await self._call(lambda d: one_shot_stats(d, state.container_id))
        return parse_stats(session_id, raw) if raw is not None else None

    async def stats_all(self) -> dict[str, ContainerStats]:
        """A reading of every running session container, taken concurrently; a session whose
        reading failed (its container stopped or went between the listing and the reading)
        is left out: unknown, never idle."""
        running = [s for s in await self.list_managed() if s.status == "running"]

        async def read(state: ContainerState) -> ContainerStats | None:
            try:
                raw = await self._call(lambda d: one_shot_stats(d, state.container_id))
            except aiodocker.DockerError:
                return None  # it stopped between the listing and the reading
            return parse_stats(state.session_id, raw) if raw is not None else None

        readings = await asyncio.gather(*(read(s) for s in running))
        return {r.session_id: r for r in readings if r is not None}

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        """Container start/die/oom/destroy events of this node's sessions, forever.

        Reconnects with backoff when dockerd goes away; every successful (re)connection yields
        a ``connected`` event, every loss a ``disconnected`` one.
        """
        filters = {"type": ["container"], "event": list(_EVENTS), "label": [self._node_label]}
        backoff = Backoff()
        while True:
            connected = False
            try:
                async for raw in event_lines(self._client(), filters):
                    if raw is None:
                        connected = True
                        backoff.reset()
                        yield RuntimeEvent(kind="connected")
                    elif (event := _to_event(raw, self.agent_id)) is not None:
                        yield event
                detail = "event stream ended"
            except (aiodocker.DockerError, *_CONNECTION_ERRORS, OSError) as exc:
                detail = str(exc)
            if connected:
                yield RuntimeEvent(kind="disconnected", detail=detail)
            await backoff.sleep()

    # ------------------------------------------------------------------ internals

    @property
    def _node_label(self) -> str:
        return f"{LABEL_NODE}={self.node_name}"

    def _client(self) -> aiodocker.Docker:
        if self._docker is None:
            self._docker = docker_client(self._url, self._timeout)
        return self._docker

    async def _call(self, op: Callable[[aiodocker.Docker], Awaitable[T]]) -> T:
        """Run ``op``; a lost connection is retried once (stale keep-alive after a dockerd
        restart), then reported as :class:`DockerUnavailable`."""
        for attempt in (1, 2):
            try:
                return await op(self._client())
            except aiodocker.DockerError as exc:
                if exc.status != CONNECTION_FAILED:
                    raise
                failure: Exception = exc
            except _CONNECTION_ERRORS as exc:
                failure = exc
            if attempt == 1:
                await asyncio.sleep(0.05)
        raise DockerUnavailable(f"Docker Engine unreachable: {failure}") from failure

    async def _list(
        self, filters: dict[str, list[str]], busy: Collection[str] = ()
    ) -> list[ContainerState]:
        """The listing says all that a created or running container's state needs (labels,
        status, addresses), and a stopped one's when it exited with code 0 (its ``Status``
        says so; nothing else ends with 0); another stopped one is inspected, for its exit
        code and OOM kill, unless its session is ``busy``. Every extra call is work for
        dockerd, which starts the containers too: inspecting every container on each look
        cost a busy node a third of its start rate."""
        listed = await self._call(
            lambda d: d.containers.list(all=True, filters=json.dumps(filters))
        )

        async def state(container: aiodocker.containers.DockerContainer) -> ContainerState | None:
            entry = container._container
            if str(container["State"]) not in ("exited", "dead"):
                return ContainerState.from_listing(entry)
            if _listed_exit_code(entry) == 0:
                return ContainerState.from_listing(entry, exit_code=0)
            if (entry.get("Labels") or {}).get(LABEL_SESSION) in busy:
                return ContainerState.from_listing(entry)
            try:
                return ContainerState.from_inspect(await self._call(lambda d: container.show()))
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return None  # removed between the listing and the inspection
                raise

        states = await asyncio.gather(*(state(c) for c in listed))
        return [self.with_sandbox_address(replace(s, owned=s.agent_id == self.agent_id))
                for s in states if s is not None]

    async def _container(self, session_id: str) -> aiodocker.containers.DockerContainer:
        state = await self.find(session_id)
        if state is None:
            raise SessionNotFound(session_id)
        return self._client().containers.container(state.container_id)

    def _files_dir(self, session_id: str) -> Path:
        return self.files_root / "sessions" / session_id

    async def _write_files(self, spec: ContainerSpec) -> Path:
        """This session's files in its own directory, and the shared ones (the hook, the
        tools) in the node's copy for their content: that copy's directory."""
        shared = spec.shared_files()
        digest = hashlib.sha256()
        for path in sorted(shared):
            digest.update(f"{path}\0{len(shared[path])}\0".encode())
            digest.update(shared[path])
        shared_dir = self.files_root / "shared" / digest.hexdigest()[:24]
        await asyncio.to_thread(write_session_files, self._files_dir(spec.session_id),
                                spec.session_files(), shared_dir, shared)
        return shared_dir

    async def _create(self, spec: ContainerSpec) -> tuple[ContainerState, bool]:
        """The session's container, and whether this call created it (else it existed)."""
        spec = replace(spec, agent_id=self.agent_id)
        image_env = await self.image_env(spec.image)
        shared_dir = await self._write_files(spec)
        config = spec.create_config(image_env, files_dir=str(self._files_dir(spec.session_id)),
                                    shared_dir=str(shared_dir))
        for host_dir in spec.host_dirs:
            await asyncio.to_thread(make_host_dir, host_dir.path, host_dir.uid, host_dir.gid)
        try:
            container = await self._call(
                lambda d: d.containers.create(config=config, name=spec.name)
            )
        except aiodocker.DockerError as exc:
            if exc.status != 409:
                raise ContainerRuntimeError(f"creating {spec.name} failed: {exc.message}") from exc
            # Another agent (or a retried request) created it first: adopt that one.
            existing = await self.find(spec.session_id)
            if existing is None:
                raise ContainerRuntimeError(
                    f"{spec.name} exists but carries no session label of node {self.node_name}"
                ) from exc
            return existing, False
        # Just created: its state is what was asked (no inspection needed until it starts).
        return ContainerState.from_inspect({
            "Id": container.id, "Name": spec.name, "State": {"Status": "created"},
            "Config": {"Labels": config.get("Labels") or {}}, "HostConfig": config["HostConfig"],
        }), True

    async def _start(self, state: ContainerState) -> ContainerState:
        container = self._client().containers.container(state.container_id)
        try:
            await self._call(lambda d: container.start())
        except aiodocker.DockerError as exc:
            if exc.status != 304:  # 304: already started
                raise ContainerRuntimeError(
                    f"starting {state.name} failed: {exc.message}"
                ) from exc
        # Started: no inspection (a call dockerd answers while it starts others). The session
        # runs from here on; one that exits at once (a short batch) is finished from its
        # ``die`` event. Addresses are known to a later ``find``.
        return replace(state, status="running", exit_code=None, oom_killed=False, error="")


def _to_event(raw: dict[str, Any], agent_id: str) -> RuntimeEvent | None:
    """A container event of this node (another agent id's, of one name, is none of ours)."""
    action = str(raw.get("Action") or raw.get("status") or "")
    kind = action.split(":", 1)[0]
    if kind not in _EVENTS:
        return None
    actor = raw.get("Actor") or {}
    attributes = actor.get("Attributes") or {}
    if attributes.get(LABEL_AGENT_ID, agent_id) != agent_id:
        return None
    code = attributes.get("exitCode")
    return RuntimeEvent(
        kind=kind,  # type: ignore[arg-type]  # checked against _EVENTS above
        session_id=str(attributes.get(LABEL_SESSION, "")),
        container_id=str(actor.get("ID") or raw.get("id") or ""),
        exit_code=int(code) if code is not None and str(code).lstrip("-").isdigit() else None,
        name=str(attributes.get("name", "")),
    )


def _listed_exit_code(entry: dict[str, Any]) -> int | None:
    """The exit code in a stopped container's listing ``Status`` (``Exited (3) 2 seconds
    ago``), or ``None`` when it says none."""
    match = _EXITED.match(str(entry.get("Status") or ""))
    return int(match[1]) if match else None
