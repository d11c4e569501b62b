"""systemd's readiness protocol (`sd_notify(3)`), in the standard library alone.

A unit of ``Type=notify`` (what `gpuslice service install` writes) counts as started only when
its main process sends ``READY=1`` to the datagram socket named by ``$NOTIFY_SOCKET``, so
`systemctl start` returns when the manager serves, the agent has joined, or `up` answers, and
units ordered after it start then. ``STOPPING=1`` says a stop has begun; ``WATCHDOG=1`` keeps a
unit with ``WatchdogSec=`` alive. Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op,
so the same code runs in a terminal, in tests and under other supervisors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

from gpuslice.common.waits import wait_event

log = logging.getLogger(__name__)


def notify(*fields: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``fields`` (``READY=1``, ``STATUS=...``) to systemd; whether it was sent.

    A socket that cannot be reached is logged, never raised: readiness is a courtesy to the
    supervisor and must not stop the service it describes."""
    address = _address((os.environ if environ is None else environ).get("NOTIFY_SOCKET", ""))
    if address is None:
        return False
    message = "\n".join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message)
    except OSError as err:
        log.warning("could not tell systemd %s: %s", " ".join(fields), err)
        return False
    return True


def ready(status: str) -> bool:
    """The service serves: ``systemctl start`` returns; ``status`` shows in `systemctl status`."""
    return notify("READY=1", f"STATUS={status}")


def stopping() -> bool:
    return notify("STOPPING=1", "STATUS=stopping")


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings when the unit asks for them (``WatchdogSec=``):
    half its timeout, as sd_watchdog_enabled(3) advises; ``None`` when it does not."""
    env = os.environ if environ is None else environ
    usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


async def keep_watchdog_fed(stop: asyncio.Event) -> None:
    """Ping the watchdog from the event loop until ``stop``: a loop that hangs stops the pings
    and systemd restarts the service. Nothing to do when the unit has no ``WatchdogSec=``."""
    interval = watchdog_interval()
    if interval is None:
        return
    while not stop.is_set():
        notify("WATCHDOG=1")
        await wait_event(stop, interval)


def _address(value: str) -> str | None:
    """The socket address from ``$NOTIFY_SOCKET``: a path, or ``@name`` for Linux's abstract
    namespace (a leading NUL byte). Other forms (``vsock:``) are not ours to reach."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None
