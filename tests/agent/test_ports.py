"""The ports served in a session, read from /proc (a fake tree here, as the kernel writes
it; the real one in tests/platform/test_port_forward.py)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuslice.agent.streams.ports import listeners, served_ports

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  " \
    "timeout inode\n"


def row(address: str, state: str, inode: int) -> str:
    return (f"   0: {address} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  "
            f"1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n")


TCP = HEADER + "".join([
    row("00000000:1F40", "0A", 101),  # 0.0.0.0:8000, listening
    row("0100007F:B26E", "0A", 102),  # 127.0.0.1:45678: a kernel's, loopback only
    row("0200170A:1388", "0A", 103),  # 10.23.0.2:5000: the container's own address
    row("0200170A:1388", "01", 104),  # an established connection on 5000
])
TCP6 = HEADER + "".join([
    row("00000000000000000000000000000000:1D4C", "0A", 201),  # [::]:7500
    row("00000000000000000000000001000000:2328", "0A", 202),  # [::1]:9000
    row("0000000000000000FFFF00000100007F:2329", "0A", 203),  # [::ffff:127.0.0.1]:9001
])


def test_only_listening_sockets_beyond_loopback_count() -> None:
    assert listeners(TCP) == [(8000, 101), (5000, 103)]
    assert listeners(TCP6) == [(7500, 201)]


def test_each_port_is_named_by_the_process_of_the_container_that_holds_it(
        tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    container = "/docker/" + "a" * 64
    process(proc, 10, "tini", ["tini", "--", "sleep"], [], container)
    process(proc, 11, "python3", ["python3", "-m", "http.server", "8000"], [101], container)
    process(proc, 12, "node", ["node", "server.js"], [103, 201], container)
    process(proc, 99, "sshd", ["/usr/sbin/sshd"], [101], "/")  # the host's: not looked into
    (proc / "10" / "net").mkdir()
    (proc / "10" / "net" / "tcp").write_text(TCP)
    (proc / "10" / "net" / "tcp6").write_text(TCP6)
    (cgroups / "pids" / container.lstrip("/")).mkdir(parents=True)
    (cgroups / "pids" / container.lstrip("/") / "cgroup.procs").write_text("10\n11\n12\n")

    found = served_ports(10, proc, cgroups)

    assert [(p.port, p.process, p.command) for p in found] == [
        (5000, "node", "node server.js"),
        (7500, "node", "node server.js"),
        (8000, "python3", "python3 -m http.server 8000"),
    ]


def test_a_process_that_cannot_be_looked_into_keeps_its_port_without_a_name(
        tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "10" / "net").mkdir(parents=True)
    (proc / "10" / "net" / "tcp").write_text(TCP)
    found = served_ports(10, proc, tmp_path / "cgroup")
    assert [(p.port, p.process) for p in found] == [(5000, ""), (8000, "")]


def process(proc: Path, pid: int, name: str, argv: list[str], sockets: list[int],
            cgroup: str) -> None:
    base = proc / str(pid)
    (base / "fd").mkdir(parents=True)
    (base / "comm").write_text(name + "\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (base / "cgroup").write_text(f"12:pids:{cgroup}\n1:name=systemd:{cgroup}\n")
    os.symlink("/dev/null", base / "fd" / "0")
    for fd, inode in enumerate(sockets, start=3):
        os.symlink(f"socket:[{inode}]", base / "fd" / str(fd))
