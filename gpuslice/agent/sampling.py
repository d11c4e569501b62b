"""Per-session GPU sampling: which session each GPU process belongs to, and what it uses.

One reading of the accelerator (NVML on nvidia nodes, the simulated processes on mock nodes)
lists the processes on each device with their memory and SM utilization. A process belongs to
a session when its cgroup names that session's container (``/proc/<pid>/cgroup``), so a
session's figures are the sum over **its own processes**, never the device's totals: an idle
session on a busy shared GPU reads about 0 %. Processes of no session (the host's, another
tool's) are counted in the device totals only.

The agent reads every ``sample_interval_ms`` (on every node; the watchdog decides on the same
reading) and keeps the readings since the last heartbeat that reached the manager: a
heartbeat carries each session's utilization averaged over them and its memory now. A figure
the accelerator cannot give is ``None`` (unknown), never 0.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuslice.agent.accelerators.base import Accelerator, DeviceUsage
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.common.schemas.agents import SessionGpuUsage

# cgroup v1 (".../docker/<id>"), systemd driver ("docker-<id>.scope"), nested hierarchies.
_CONTAINER_IN_CGROUP = re.compile(r"(?:docker[-/]|/)([0-9a-f]{64})(?:\.scope)?(?:/|$)")
MAX_PENDING = 1000  # readings kept while heartbeats fail (about half an hour at 2 s)


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading: every device, each GPU process's session, and each session's figures."""

    devices: list[DeviceUsage]
    pid_sessions: dict[int, str]
    sessions: dict[str, list[SessionGpuUsage]]


@dataclass(slots=True)
class _Pending:
    seq: int
    sessions: dict[str, list[SessionGpuUsage]] = field(default_factory=dict)


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


def pid_sessions(
    usage: Iterable[DeviceUsage],
    containers: Iterable[ContainerState],
    proc_root: Path = Path("/proc"),
) -> dict[int, str]:
    """``{pid: session id}`` for the GPU processes that run in a session's container."""
    sessions_by_container = {c.container_id: c.session_id for c in containers}
    found: dict[int, str] = {}
    for device in usage:
        pids = {p.pid for p in device.processes} | set(device.process_utilization or ())
        for pid in pids - found.keys():
            container_id = container_id_of_pid(pid, proc_root)
            if container_id in sessions_by_container:
                found[pid] = sessions_by_container[container_id]
    return found


def slice_devices(containers: Iterable[ContainerState]) -> dict[str, list[str]]:
    """``{session id: [device uuid, ...]}`` from the containers' allocation labels."""
    return {
        c.session_id: [str(d["uuid"]) for d in c.allocation.get("devices", [])]
        for c in containers
    }


def session_figures(
    usage: Iterable[DeviceUsage],
    owners: Mapping[int, str],
    slices: Mapping[str, Collection[str]],
) -> dict[str, list[SessionGpuUsage]]:
    """Each session's memory and utilization per device, from its own processes only.

    Every session in ``slices`` gets its slice's devices (0 when its processes hold nothing
    there), plus any other device its processes use. Memory is unknown when NVML could not
    attribute a process's memory; utilization when the device has no per-process figures.
    """
    figures: dict[str, list[SessionGpuUsage]] = {}
    for device in usage:
        held: dict[str, list[int | None]] = {s: [] for s, uuids in slices.items()
                                             if device.uuid in uuids}
        for process in device.processes:
            if (session_id := owners.get(process.pid)) is not None:
                held.setdefault(session_id, []).append(process.used)
        busy: dict[str, int] = {}
        for pid, percent in (device.process_utilization or {}).items():
            if (session_id := owners.get(pid)) is not None:
                held.setdefault(session_id, [])
                busy[session_id] = busy.get(session_id, 0) + percent
        for session_id, amounts in held.items():
            memory = None if None in amounts else sum(a for a in amounts if a is not None)
            known = device.process_utilization is not None
            figures.setdefault(session_id, []).append(SessionGpuUsage(
                uuid=device.uuid, mem_used=memory,
                utilization=min(100, busy.get(session_id, 0)) if known else None,
            ))
    for session_id, uuids in slices.items():  # a slice on a device no reading covers
        seen = {g.uuid for g in figures.get(session_id, [])}
        figures.setdefault(session_id, []).extend(
            SessionGpuUsage(uuid=u) for u in uuids if u not in seen
        )
    return figures


class GpuSampler:
    """Reads the accelerator and keeps what heartbeats report (a measurement cache only)."""

    def __init__(self, accelerator: Accelerator, proc_root: Path = Path("/proc")) -> None:
        self.accelerator = accelerator
        self.proc_root = proc_root
        self.devices: list[DeviceUsage] = []  # the latest reading of every device
        self.latest: dict[str, list[SessionGpuUsage]] = {}  # each session now
        self.owners: dict[int, str] = {}  # each GPU process's session at the latest reading
        self._pending: deque[_Pending] = deque(maxlen=MAX_PENDING)
        self._seq = 0
        self._lock = threading.Lock()  # read() runs in a worker thread

    def read(self, containers: Collection[ContainerState]) -> Reading:
        """One reading (blocking: NVML and /proc); run it in a thread."""
        devices = self.accelerator.usage()
        owners = pid_sessions(devices, containers, self.proc_root)
        sessions = session_figures(devices, owners, slice_devices(containers))
        with self._lock:
            self._seq += 1
            self.devices, self.latest, self.owners = devices, sessions, owners
            self._pending.append(_Pending(self._seq, sessions))
        return Reading(devices, owners, sessions)

    def processes(self, session_id: str) -> list[dict[str, object]]:
        """The session's own GPU processes at the latest reading, as the session sees them
        (``nvidia-smi --query-compute-apps``): its pid (the container's, not the host's), its
        name, the device and the memory it holds."""
        with self._lock:
            devices, owners = self.devices, self.owners
        return [
            {"pid": _pid_inside(p.pid, self.proc_root), "name": _comm(p.pid, self.proc_root),
             "uuid": device.uuid, "used": p.used}
            for device in devices for p in device.processes if owners.get(p.pid) == session_id
        ]

    def take(self) -> tuple[dict[str, list[SessionGpuUsage]], int]:
        """Each session's figures over the readings not yet sent: utilization averaged over
        them (unknown only when no reading knew it), memory as last read. With a marker for
        :meth:`sent`."""
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return {}, 0
        averaged: dict[str, list[SessionGpuUsage]] = {}
        for session_id, now in pending[-1].sessions.items():
            averaged[session_id] = [
                SessionGpuUsage(uuid=g.uuid, mem_used=g.mem_used,
                                utilization=_mean(pending, session_id, g.uuid))
                for g in now
            ]
        return averaged, pending[-1].seq

    def sent(self, marker: int) -> None:
        """The heartbeat with the readings up to ``marker`` reached the manager."""
        with self._lock:
            while self._pending and self._pending[0].seq <= marker:
                self._pending.popleft()


def _mean(pending: list[_Pending], session_id: str, uuid: str) -> int | None:
    values = [
        g.utilization
        for reading in pending
        for g in reading.sessions.get(session_id, ())
        if g.uuid == uuid and g.utilization is not None
    ]
    return sum(values) // len(values) if values else None


def _pid_inside(pid: int, proc_root: Path) -> int | None:
    """A host pid as the process's own pid namespace numbers it (the last of ``NSpid``)."""
    try:
        status = (proc_root / str(pid) / "status").read_text()
    except OSError:
        return None  # the process ended since the reading
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return None


def _comm(pid: int, proc_root: Path) -> str | None:
    """The process's name as nvidia-smi shows it: the program it was started as (argv[0]),
    else its kernel name."""
    for name, read in (("cmdline", lambda b: b.split(b"\0", 1)[0]), ("comm", bytes.strip)):
        try:
            value = read((proc_root / str(pid) / name).read_bytes())
        except OSError:
            continue  # no such file here, or the process ended
        if value:
            return value.decode(errors="replace")
    return None
