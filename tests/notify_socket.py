"""What systemd does for a ``Type=notify`` unit, for tests on machines without systemd: a
datagram socket bound where ``$NOTIFY_SOCKET`` points (a path, or ``@name`` in Linux's abstract
namespace), and the messages a process sends there (``READY=1``, ``STATUS=...``)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.waits import Deadline


class NotifySocket:
    """``env`` is what to give the process; ``wait_for("READY=1", process_alive)`` waits."""

    def __init__(self, directory: Path | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        if directory is None:
            name = f"gpuslice-test-notify-{uuid.uuid4().hex}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            path = directory / "notify.sock"
            self.sock.bind(str(path))
            self.address = str(path)
        self.messages: list[list[str]] = []  # each message's fields, in arrival order

    @property
    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.address}

    def wait_for(self, field: str, alive: Callable[[], bool] = lambda: True,
                 timeout: float = 120.0, on_message: Callable[[list[str]], None] | None = None,
                 ) -> list[str]:
        """The first message (received from now on) holding ``field``; ``on_message`` runs as
        each arrives, before the next is read (to check the world at that very moment)."""
        deadline = Deadline(timeout)
        while True:
            self.sock.settimeout(0.2)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                if not alive():
                    raise AssertionError(f"the process ended before {field!r}; got "
                                         f"{self.messages}") from None
                if deadline.passed:
                    raise AssertionError(f"no {field!r} within {deadline.seconds:.0f}s; got "
                                         f"{self.messages}") from None
                continue
            fields = data.decode().split("\n")
            self.messages.append(fields)
            if on_message is not None:
                on_message(fields)
            if field in fields:
                return fields

    def close(self) -> None:
        self.sock.close()
        if self.address.startswith("/"):
            os.unlink(self.address)
