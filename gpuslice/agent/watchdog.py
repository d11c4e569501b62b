"""The GPU memory watchdog: which sessions hold more GPU memory than their slice.

Pure logic over one accelerator reading (NVML, or the simulated processes of the mock
accelerator, so CI runs it too): processes are tied to sessions through their cgroup
(``sampling.pid_sessions``), and sessions to their slices through the allocation label. The
agent stops every session this returns, with :data:`REASON` as the reason in its status. A
process whose memory NVML cannot attribute is not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuslice.agent.accelerators.base import DeviceUsage
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.agent.sampling import container_id_of_pid, pid_sessions
from gpuslice.common.resources import format_mem

REASON = "exceeded its GPU memory slice"


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
            if session_id is not None and process.used is not None:
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
    """One watchdog pass over an accelerator reading and the node's session containers."""
    containers = list(containers)
    usage = list(usage)
    owners = pid_sessions(usage, containers, proc_root)
    return find_overuse(usage, owners, slice_limits(containers), tolerance=tolerance)


__all__ = ["REASON", "Overuse", "check", "container_id_of_pid", "find_overuse", "slice_limits"]
