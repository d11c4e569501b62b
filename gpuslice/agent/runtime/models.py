"""What the runtime reports: containers' states, exec results, resource usage, events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuslice.agent.runtime.spec import (
    LABEL_AGENT_ID,
    LABEL_ALLOCATION,
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_SESSION,
    LABEL_TYPE,
)


class ContainerRuntimeError(RuntimeError):
    """Base of the runtime's errors."""


class DockerUnavailable(ContainerRuntimeError):
    """The Docker Engine cannot be reached now (stopped, restarting, socket missing)."""


class ImageNotFound(ContainerRuntimeError):
    """The session's image is not on this node (the runtime never pulls)."""

    def __init__(self, image: str) -> None:
        super().__init__(f"image {image} is not present on this node")
        self.image = image


class ImagePullError(ContainerRuntimeError):
    """An image could not be pulled (Docker's message)."""


class SessionNotFound(ContainerRuntimeError):
    """No container exists for the session."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no container for session {session_id}")
        self.session_id = session_id


@dataclass(frozen=True, slots=True)
class ContainerState:
    """A session container as Docker reports it, rebuilt from its labels alone."""

    session_id: str
    container_id: str
    name: str
    status: str  # Docker's: created, running, paused, restarting, removing, exited, dead
    exit_code: int | None  # set once the container has run and stopped
    oom_killed: bool
    error: str
    started_at: str
    finished_at: str
    owner: str
    session_type: str
    node: str
    allocation: Mapping[str, Any] = field(default_factory=dict)
    addresses: Mapping[str, str] = field(default_factory=dict)  # network -> IPv4 address
    # The network sandbox whose network namespace it joined (agent/isolation/sandboxes.py),
    # or "" when Docker wired it into a network itself.
    sandbox: str = ""
    # The id of the agent that made it (agent/identity.py); "" for one made before agents had
    # ids. ``owned``: it is this agent's own (the runtime that listed it says so).
    agent_id: str = ""
    owned: bool = True
    mounts: Mapping[str, str] = field(default_factory=dict)  # bind mounts: target -> source
    pid: int = 0  # its first process's, on the host (from an inspection only; 0 unknown)

    @property
    def ip_address(self) -> str | None:
        """The container's address (on the node's session network when it has one): where
        the node reaches its apps."""
        return next(iter(self.addresses.values()), None)

    @property
    def running(self) -> bool:
        return self.status in ("running", "paused", "restarting")

    @property
    def finished(self) -> bool:
        return self.status in ("exited", "dead")

    @classmethod
    def from_inspect(cls, info: Mapping[str, Any]) -> ContainerState:
        state = info.get("State") or {}
        labels = (info.get("Config") or {}).get("Labels") or {}
        status = str(state.get("Status", "unknown"))
        ran = bool(state.get("StartedAt")) and not str(state["StartedAt"]).startswith("0001")
        try:
            allocation = json.loads(labels.get(LABEL_ALLOCATION, "{}"))
        except ValueError:
            allocation = {}
        return cls(
            session_id=labels.get(LABEL_SESSION, ""),
            container_id=str(info["Id"]),
            name=str(info.get("Name", "")).lstrip("/"),
            status=status,
            exit_code=int(state.get("ExitCode", 0))
            if status in ("exited", "dead") and ran
            else None,
            oom_killed=bool(state.get("OOMKilled", False)),
            error=str(state.get("Error", "")),
            started_at=str(state.get("StartedAt", "")),
            finished_at=str(state.get("FinishedAt", "")),
            owner=labels.get(LABEL_OWNER, ""),
            session_type=labels.get(LABEL_TYPE, ""),
            node=labels.get(LABEL_NODE, ""),
            allocation=allocation,
            addresses=addresses_of(info),
            sandbox=joined(info),
            agent_id=labels.get(LABEL_AGENT_ID, ""),
            mounts=binds_of(info),
            pid=int(state.get("Pid") or 0),
        )

    @classmethod
    def exited_cleanly(cls, container_id: str, name: str, session_id: str) -> ContainerState:
        """A container that exited with code 0, as its ``die`` event says (no OOM kill nor
        runtime error ends with 0, so there is nothing more to look up)."""
        return cls.from_inspect({
            "Id": container_id, "Name": name,
            "State": {"Status": "exited", "ExitCode": 0, "StartedAt": "(it ran)"},
            "Config": {"Labels": {LABEL_SESSION: session_id}},
        })

    @classmethod
    def from_listing(
        cls, entry: Mapping[str, Any], exit_code: int | None = None
    ) -> ContainerState:
        """A container from its entry in a container listing (which has no exit code, OOM
        flag nor times: none of them applies before it stops). ``exit_code``: a stopped
        one's, when known otherwise (0 from its listed status: no OOM kill nor runtime error
        ends with 0)."""
        labels = entry.get("Labels") or {}
        names = entry.get("Names") or [""]
        state: dict[str, Any] = {"Status": entry.get("State", "unknown")}
        if exit_code is not None:
            state.update(ExitCode=exit_code, StartedAt="(it ran)")
        return cls.from_inspect({
            "Id": entry["Id"], "Name": names[0], "State": state,
            "Config": {"Labels": labels}, "NetworkSettings": entry.get("NetworkSettings"),
            "HostConfig": entry.get("HostConfig"), "Mounts": entry.get("Mounts"),
        })


def joined(info: Mapping[str, Any]) -> str:
    """The container whose network namespace this one joined (``NetworkMode`` ``container:<id>``,
    in an inspection and a listing alike), or ""."""
    mode = str((info.get("HostConfig") or {}).get("NetworkMode") or "")
    return mode.removeprefix("container:") if mode.startswith("container:") else ""


def binds_of(info: Mapping[str, Any]) -> dict[str, str]:
    """A container's bind mounts, target -> source on the node, from its inspection or
    listing (one just created has none listed: its spec's mounts are what was asked)."""
    mounts = info.get("Mounts") or []
    return {str(m["Destination"]): str(m["Source"]) for m in mounts
            if isinstance(m, dict) and m.get("Type") == "bind"
            and m.get("Destination") and m.get("Source")}


def addresses_of(info: Mapping[str, Any]) -> dict[str, str]:
    """A container's IPv4 address per network, from its inspection or listing."""
    networks = (info.get("NetworkSettings") or {}).get("Networks") or {}
    return {name: str(n["IPAddress"]) for name, n in networks.items()
            if isinstance(n, dict) and n.get("IPAddress")}


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """A tagged image on the node: ``repo:tag``, Docker's image id, bytes, its labels."""

    tag: str
    image_id: str
    size: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class ContainerStats:
    """One reading of a container's usage. CPU time is cumulative: rates come from two readings."""

    session_id: str
    read_at: float  # seconds since the epoch (Docker's reading time)
    cpu_ns: int  # total CPU time used so far
    memory_used: int  # bytes, page cache that can be dropped excluded (as `docker stats`)
    memory_limit: int
    pids: int

    def cpu_milli_since(self, earlier: ContainerStats) -> int:
        """Average milli-cores busy between ``earlier`` and this reading (1000 = one core),
        rounded down."""
        elapsed_us = round((self.read_at - earlier.read_at) * 1_000_000)
        if elapsed_us <= 0:
            return 0
        # ns of CPU per µs of wall time is thousandths of a core: integers from here on
        return max(0, (self.cpu_ns - earlier.cpu_ns) // elapsed_us)


EventKind = Literal["connected", "disconnected", "start", "die", "oom", "destroy"]


@dataclass(frozen=True, slots=True)
class RuntimeEvent:
    """A change worth reconciling. ``connected`` follows every (re)connection to Docker:
    events may have been missed while it was away, so the consumer should re-list."""

    kind: EventKind
    session_id: str = ""
    container_id: str = ""
    exit_code: int | None = None
    detail: str = ""
    name: str = ""  # the container's
