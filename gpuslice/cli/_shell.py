"""`gpuslice session shell`'s side of a terminal: this terminal in raw mode, relayed both ways.

Raw mode sends every key as it is (Ctrl-C too: the shell's TTY turns it into SIGINT there);
window size changes follow (SIGWINCH). Keys typed while it connects are kept for the shell.
A dropped connection is reattached to the same shell
(the manager keeps it a minute); the shell's exit code becomes this command's.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from gpuslice.client.terminal import Terminal

RECONNECT_FOR = 50.0  # seconds to keep trying after a lost connection (the shell is kept 60)


def size() -> tuple[int, int]:
    cols, rows = shutil.get_terminal_size((80, 24))
    return rows, cols


def run(open_terminal: Callable[[str | None], Terminal]) -> int:
    """Relay stdin and stdout to a terminal until its shell exits; its exit code."""
    term = open_terminal(None)
    with _raw(sys.stdin.fileno()), _on_resize(lambda: term.resize(*size())):
        while True:
            code = _relay(term)
            if code is not None:
                return code
            term = _reattach(open_terminal, term)


def _relay(term: Terminal) -> int | None:
    """Pass bytes until the terminal ends: the exit code, or ``None`` if the link was lost."""
    ended = threading.Event()

    def output() -> None:
        while (data := term.read()) is not None:
            os.write(sys.stdout.fileno(), data)
        ended.set()

    threading.Thread(target=output, daemon=True).start()
    stdin, eof = sys.stdin.fileno(), False
    while not ended.is_set():
        ready, _, _ = select.select([] if eof else [stdin], [], [], 0.1)
        if ready:
            data = os.read(stdin, 65536)
            if not data:  # input from a pipe ended: end the shell's input the same way
                eof, data = True, b"\x04"
            term.write(data)
    return term.exit_code


def _reattach(open_terminal: Callable[[str | None], Terminal], lost: Terminal) -> Terminal:
    sys.stderr.write("\r\n[connection lost; reconnecting]\r\n")
    deadline = time.monotonic() + RECONNECT_FOR
    while True:
        try:
            term = open_terminal(lost.id)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
            continue
        if not term.resumed:
            term.close()
            raise ConnectionError("the shell is gone (its session restarted, or it was kept "
                                  "too long without a connection)")
        term.resize(*size())
        return term


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    if not os.isatty(fd):
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        # TCSADRAIN, not setraw's default TCSAFLUSH: keys typed while the shell was connecting
        # wait in the terminal's input and must reach the shell (as with ssh), not be dropped.
        tty.setraw(fd, termios.TCSADRAIN)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _on_resize(resize: Callable[[], None]) -> Iterator[None]:
    if not hasattr(signal, "SIGWINCH"):
        yield
        return
    previous = signal.signal(signal.SIGWINCH, lambda *_: resize())
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
