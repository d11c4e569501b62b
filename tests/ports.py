"""Free TCP ports for servers the tests start.

A port is picked below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), which
is where every outgoing connection takes its local port. A port asked of the kernel with
``bind(0)`` comes from that range, and between the probe and the server's bind (or a server's
restart on the same port) any outgoing connection on the machine may take it: with the test
passes running side by side, they make thousands. Below the range only another explicit bind
can collide, and the probe sees it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # clear of the well-known and registered ports services here use


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, outside the range outgoing connections draw from."""
    top = _ephemeral_start()
    if top - _LOWEST < 1000:  # a machine whose ephemeral range starts low: ask the kernel
        with socket.socket() as probe:
            probe.bind((host, 0))
            return int(probe.getsockname()[1])
    for port in random.sample(range(_LOWEST, top), 200):
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {_LOWEST} and {top} after 200 tries")


def free_span(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive ports nothing listens on now (a port range for the
    manager to allocate from)."""
    for _ in range(50):
        first = free_port(host)
        probes = [socket.socket() for _ in range(count)]
        try:
            for offset, probe in enumerate(probes):
                probe.bind((host, first + offset))
            return first
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise RuntimeError(f"no {count} consecutive free ports after 50 tries")
