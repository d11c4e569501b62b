"""The TCP ports served in a session: any server a user starts there is an app.

Read from the node, without an exec or anything in the image: the listening sockets of the
container's network namespace are in ``/proc/<pid>/net/tcp`` and ``tcp6`` of any of its
processes, and the process holding each socket is the one whose ``/proc/<pid>/fd`` links to
its inode (the container's processes are those of its cgroup). Only sockets others can reach
count: on all addresses or the container's own, not on its loopback alone (Jupyter's kernels,
language servers: a session's own plumbing). Read when someone looks (an ``apps`` request),
never on a timer; a process this agent may not look into keeps its port, without a name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.common.schemas.agents import ListeningPort

LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes states
MAX_PORTS = 1024
MAX_PROCESSES = 4096  # of one session, looked into for the sockets' owners


class SessionPorts:
    """Each session's served ports, by its container's processes."""

    def __init__(self, runtime: DockerRuntime, proc: Path = Path("/proc"),
                 cgroups: Path = Path("/sys/fs/cgroup")) -> None:
        self.runtime = runtime
        self.proc = proc
        self.cgroups = cgroups
        self._pids: dict[str, int] = {}  # container id -> its first process (fixed for life)

    async def of(self, session_id: str) -> list[ListeningPort]:
        """The ports served in the session now; none when its container does not run."""
        pid = await self.pid_of(session_id)
        if pid is None:
            return []
        return await asyncio.to_thread(served_ports, pid, self.proc, self.cgroups)

    async def pid_of(self, session_id: str) -> int | None:
        """The host pid of the session's container's first process, while it runs."""
        state = await self.runtime.find(session_id)
        if state is None or not state.running:
            return None
        pid = self._pids.get(state.container_id)
        if pid is None:
            inspected = await self.runtime.inspect(state.container_id)
            if inspected is None or not inspected.pid:
                return None
            pid = inspected.pid
            self._pids = {k: v for k, v in self._pids.items() if self._alive(v)}
            self._pids[state.container_id] = pid
        return pid

    def _alive(self, pid: int) -> bool:
        return (self.proc / str(pid)).exists()


def served_ports(pid: int, proc: Path = Path("/proc"),
                 cgroups: Path = Path("/sys/fs/cgroup")) -> list[ListeningPort]:
    """The ports listened on, beyond loopback, in the network namespace of process ``pid``,
    each with the name and command of the process of ``pid``'s cgroup that holds it."""
    inodes: dict[int, int] = {}  # socket inode -> port
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for port, inode in listeners((proc / str(pid) / "net" / name).read_text()):
                inodes.setdefault(inode, port)
    owners = _owners(set(inodes), _cgroup_pids(pid, proc, cgroups), proc)
    found: dict[int, ListeningPort] = {}
    for inode, port in sorted(inodes.items(), key=lambda item: item[1]):
        process, command = owners.get(inode, ("", ""))
        if port not in found or (process and not found[port].process):
            found[port] = ListeningPort(port=port, process=process[:64], command=command[:512])
    return list(found.values())[:MAX_PORTS]


def listeners(table: str) -> list[tuple[int, int]]:
    """``(port, socket inode)`` of the listening sockets in a ``/proc/net/tcp{,6}`` table
    that are not on a loopback address."""
    found = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, _, port = fields[1].partition(":")
        if _loopback(address):
            continue
        found.append((int(port, 16), int(fields[9])))
    return found


def _loopback(hex_address: str) -> bool:
    """Whether a ``/proc/net/tcp`` address (the kernel's words in host byte order, little
    endian here) is a loopback one, an IPv4-mapped one included."""
    raw = bytes.fromhex(hex_address)
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _cgroup_pids(pid: int, proc: Path, cgroups: Path) -> list[int]:
    """The processes of ``pid``'s cgroup (the container's): cgroup v2, else v1's hierarchies
    (a controller's ``cgroup.procs``); ``[pid]`` when neither can be read."""
    with contextlib.suppress(OSError):
        for line in (proc / str(pid) / "cgroup").read_text().splitlines():
            hierarchy, _, path = line.partition(":")[2].partition(":")
            if path.strip("/") == "":
                continue  # a controller the container has no group of: the whole host
            for controller in ([""] if not hierarchy else hierarchy.split(",")):
                procs = cgroups / controller.removeprefix("name=") / path.lstrip("/")
                with contextlib.suppress(OSError, ValueError):
                    text = (procs / "cgroup.procs").read_text()
                    return [int(p) for p in text.split()][:MAX_PROCESSES]
    return [pid]


def _owners(inodes: set[int], pids: Iterable[int], proc: Path) -> dict[int, tuple[str, str]]:
    """Socket inode -> (process name, command line) of the process that holds it."""
    owners: dict[int, tuple[str, str]] = {}
    for pid in pids:
        if len(owners) == len(inodes):
            break
        base = proc / str(pid)
        held = _sockets(base) & inodes
        if not held:
            continue
        name, command = _described(base)
        for inode in held:
            owners.setdefault(inode, (name, command))
    return owners


def _sockets(base: Path) -> set[int]:
    """The socket inodes a process holds (none when it ended or may not be looked into)."""
    found = set()
    with contextlib.suppress(OSError):
        for fd in (base / "fd").iterdir():
            with contextlib.suppress(OSError):
                link = str(fd.readlink())
                if link.startswith("socket:["):
                    found.add(int(link[8:-1]))
    return found


def _described(base: Path) -> tuple[str, str]:
    try:
        name = (base / "comm").read_text().strip()
        command = (base / "cmdline").read_bytes().replace(b"\0", b" ").strip()
    except OSError:
        return "", ""
    return name, command.decode(errors="replace")
