"""A socket made inside a session's network namespace, to reach what listens on its loopback.

A server a user starts often listens on ``127.0.0.1`` only (``mlflow ui``, Gradio, a debugger,
a database's default): from the node it cannot be reached at the container's address. The
agent (root) makes the socket inside the container's network namespace instead, as
``kubectl port-forward`` does: a thread of its own enters the namespace (``setns``), makes the
socket, and goes back; a socket keeps the namespace it was made in, so it is then connected
from the event loop as any other. The thread is a new one each time, never a pooled one: a
thread left in a session's namespace would be one nobody can trust.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000


def socket_in(pid: int, proc: Path = Path("/proc")) -> socket.socket:
    """A non-blocking TCP socket in the network namespace of process ``pid``; ``OSError``
    when this process may not enter it (not root) or ``pid`` is gone."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            made.append(_made_in(proc / str(pid) / "ns" / "net"))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=make, name=f"netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    made[0].setblocking(False)
    return made[0]


def _made_in(namespace: Path) -> socket.socket:
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(namespace, os.O_RDONLY)
        try:
            _setns(libc, target)
        finally:
            os.close(target)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(libc, own)  # back home; should that ever fail, this thread ends here
    finally:
        os.close(own)


def _setns(libc: ctypes.CDLL, fd: int) -> None:
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
