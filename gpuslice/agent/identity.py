"""This node's identity on its Docker Engine: an id of its own, and one live agent per name.

Several platforms may share one Docker Engine (two `gpuslice up` with their own data
directories, or two agents): each must touch only its own containers. So every container an
agent makes carries its **agent id** (label ``gpuslice.agent-id``), made once and kept in the
agent's data directory (``agent-id``): it stays the node's across restarts and upgrades, and no
other data directory has it. An agent removes only containers with its own id. The manager
gets it too (registration, heartbeats): a second live agent of one node is refused there.

Two live agents of one **name** on one engine would still share the name's session network
and firewall chains, so the second is refused: :class:`EngineNameLock` is an abstract Unix
socket named by the engine's id and the node name, bound for the agent's life. The kernel
frees it when the process dies, however it dies (a SIGKILL leaves nothing stale), it needs no
file anyone must be allowed to write, and it is seen by every user's processes on the machine
(one network namespace). The refusal names the holder (its pid and command line, from the
socket's peer credentials).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import socket
import struct
import uuid
from pathlib import Path

AGENT_ID_FILE = "agent-id"
_AGENT_ID = re.compile(r"^[0-9a-f]{32}$")


class NameTaken(RuntimeError):
    """Another live agent of this node name uses this Docker Engine; ``str()`` is one sentence
    for the operator."""


def agent_id(data_dir: Path) -> str:
    """The agent's id, made on the first call for ``data_dir`` and read from it after."""
    path = data_dir / AGENT_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        found = path.read_text().strip()
        if _AGENT_ID.fullmatch(found):
            return found
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    made = uuid.uuid4().hex
    partial = path.with_name(f".{AGENT_ID_FILE}.{os.getpid()}")
    partial.write_text(made + "\n")
    os.replace(partial, path)  # whole or absent: a half-written id would orphan containers
    return made


class EngineNameLock:
    """Held while this process is the agent of ``node_name`` on the engine ``engine_id``."""

    def __init__(self, engine_id: str, node_name: str) -> None:
        self.node_name = node_name
        digest = hashlib.sha256(f"{engine_id}\0{node_name}".encode()).hexdigest()[:40]
        self.address = f"\0gpuslice-node/{digest}"
        self._sock: socket.socket | None = None

    def acquire(self) -> None:
        """Take it, or raise :class:`NameTaken` naming the live agent that holds it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.address)
            sock.listen(64)  # never accepted: a refused agent's connect reads who holds it
        except OSError as err:
            sock.close()
            if err.errno != errno.EADDRINUSE:
                raise
            raise NameTaken(
                f"node name {self.node_name!r} is already used on this Docker Engine by a "
                f"live agent ({self._holder()}): stop it, or give this node another name "
                "(`gpuslice up --node-name`, or `node_name` in the agent's settings)"
            ) from None
        self._sock = sock

    def release(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()

    def _holder(self) -> str:
        """The holder's pid and command line, as far as this process may see them."""
        pid = 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            with contextlib.suppress(OSError):
                probe.connect(self.address)
                creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                         struct.calcsize("3i"))
                pid = struct.unpack("3i", creds)[0]
        if pid <= 0:
            return "another process"
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return f"pid {pid}"
        command = " ".join(a.decode(errors="replace") for a in argv if a)
        return f"pid {pid}: {command[:200]}" if command else f"pid {pid}"
