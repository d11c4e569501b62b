"""The GPU memory watchdog (nvidia plugin): which sessions hold more GPU memory than their slice.

Pure logic over one NVML reading: processes are tied to sessions through their cgroup (which
names the container), and sessions to their slices through the allocation label. The agent
stops every session this returns, with :data:`REASON` as the reason in its status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuslice.agent.accelerators.base import DeviceUsage
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.common.resources import format_mem

REASON = "exceeded its GPU memory slice"

# cgroup v1 (".../docker/<id>"), systemd driver ("docker-<id>.scope"), nested hierarchies.
_CONTAINER_IN_CGROUP = re.compile(r"(?:docker[-/]|/)([0-9a-f]{64})(?:\.scope)?(?:/|$)")


@dataclass(frozen=True, slots=True)
class Overuse:
    """A session holding ``used`` bytes on a device where its slice is ``limit`` bytes."""

    session_id: str
    device_uuid: str
    used: int
    limit: int

    @property
    def reason(self) -> str:
        return REASON

    @property
    def detail(self) -> str:
        return (
            f"{REASON}: {format_mem(self.used)} in use on {self.device_uuid}, "
            f"slice {format_mem(self.limit)}"
        )


def slice_limits(containers: Iterable[ContainerState]) -> dict[str, dict[str, int]]:
    """``{session id: {device uuid: slice bytes}}`` from the containers' allocation labels."""
    limits: dict[str, dict[str, int]] = {}
    for state in containers:
        devices = state.allocation.get("devices", [])
        limits[state.session_id] = {str(d["uuid"]): int(d["memory_bytes"]) for d in devices}
    return limits


def find_overuse(
    usage: Iterable[DeviceUsage],
    pid_sessions: Mapping[int, str],
    limits: Mapping[str, Mapping[str, int]],
    *,
    tolerance: int = 0,
) -> list[Overuse]:
    """Sessions whose processes together hold more than slice + ``tolerance`` on a device.

    Processes of no session (the host's, other tools') are not the watchdog's business. A
    session's memory on a device it holds no slice of counts against a limit of zero.
    """
    held: dict[tuple[str, str], int] = {}
    for device in usage:
        for process in device.processes:
            session_id = pid_sessions.get(process.pid)
            if session_id is not None:
                key = (session_id, process.device_uuid)
                held[key] = held.get(key, 0) + process.used
    found = []
    for (session_id, uuid), used in sorted(held.items()):
        limit = limits.get(session_id, {}).get(uuid, 0)
        if used > limit + tolerance:
            found.append(Overuse(session_id, uuid, used, limit))
    return found


def check(
    usage: Iterable[DeviceUsage],
    containers: Iterable[ContainerState],
    *,
    tolerance: int = 0,
    proc_root: Path = Path("/proc"),
) -> list[Overuse]:
    """One watchdog pass over an NVML reading and the node's session containers."""
    containers = list(containers)
    usage = list(usage)
    sessions_by_container = {c.container_id: c.session_id for c in containers}
    pid_sessions: dict[int, str] = {}
    for device in usage:
        for process in device.processes:
            container_id = container_id_of_pid(process.pid, proc_root)
            if container_id in sessions_by_container:
                pid_sessions[process.pid] = sessions_by_container[container_id]
    return find_overuse(usage, pid_sessions, slice_limits(containers), tolerance=tolerance)


def container_id_of_pid(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The Docker container a host process runs in, from ``/proc/<pid>/cgroup``."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None  # the process ended, or is not visible from here
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        matches = _CONTAINER_IN_CGROUP.findall(path)
        if matches:
            return str(matches[-1])
    return None
