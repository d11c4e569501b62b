"""Terminals: a shell on a TTY in a session's container, kept across a dropped connection.

Nothing is needed in the image but a shell: the terminal is an Engine API exec with a TTY, run
as the session's user (bash when the image has it, else sh). Its output is read as it comes,
whether or not anyone is attached, into a buffer of the last ``REPLAY`` bytes; while a stream is
attached it gets the output too, at its own pace (a slow reader holds the shell back, as over
ssh). When the stream drops, the shell is kept ``keep`` seconds: a stream that asks for the same
terminal id within that time is attached to the same shell, its recent output replayed first.
After that the shell gets SIGHUP (it passes it on to its jobs), then SIGKILL.

A terminal belongs to one session: an id asked for by another session's stream is unknown there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
from typing import Protocol

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.execs import ExecProcess

log = logging.getLogger(__name__)
SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i; "
         "else exec sh -i; fi"]
ENV = {"TERM": "xterm-256color"}
REPLAY = 256 * 1024  # bytes of recent output a reattached stream gets first (at least 64 KiB)
MAX_PER_SESSION = 16
HANGUP_GRACE = 2.0  # seconds between SIGHUP and SIGKILL when a kept shell is let go


class TerminalError(RuntimeError):
    """A terminal cannot be opened (too many, no container)."""


class Sink(Protocol):
    """Where an attached terminal's output and end go (a stream to a person)."""

    async def output(self, data: bytes) -> None: ...

    async def exited(self, code: int) -> None: ...


class Terminal:
    def __init__(self, terminal_id: str, session_id: str, process: ExecProcess) -> None:
        self.id = terminal_id
        self.session_id = session_id
        self.process = process
        self.attached: Sink | None = None
        self._recent = bytearray()
        self._wrapped = False
        self._lock = asyncio.Lock()
        self._letting_go: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()
        self.exit_code: int | None = None

    async def attach(self, sink: Sink) -> None:
        """Give ``sink`` the recent output, then everything that follows (it replaces any
        earlier stream: the newest connection wins)."""
        if self._letting_go is not None:
            self._letting_go.cancel()
            self._letting_go = None
        async with self._lock:
            if self._recent:
                await sink.output(self._replay())
            self.attached = sink

    def detach(self, sink: Sink, keep: float) -> None:
        """``sink`` dropped: keep the shell ``keep`` seconds for a reattach, then end it."""
        if self.attached is not sink:
            return
        self.attached = None
        if not self.ended.is_set() and self._letting_go is None:
            self._letting_go = asyncio.create_task(self._let_go(keep))

    async def write(self, data: bytes) -> None:
        await self.process.write(data)

    async def resize(self, rows: int, cols: int) -> None:
        await self.process.resize(rows, cols)

    async def pump(self) -> None:
        """Read the shell's output until it ends; tell the attached stream its exit code."""
        try:
            while (chunk := await self.process.read()) is not None:
                async with self._lock:
                    self._remember(chunk)
                    sink = self.attached
                if sink is not None:
                    with contextlib.suppress(Exception):  # its stream broke: it detaches
                        await sink.output(chunk)
            with contextlib.suppress(Exception):
                self.exit_code = await self.process.exit_code()
        finally:
            self.ended.set()
            sink = self.attached
            if sink is not None:
                with contextlib.suppress(Exception):
                    await sink.exited(self.exit_code if self.exit_code is not None else -1)
            with contextlib.suppress(Exception):
                await self.process.close()

    async def end(self) -> None:
        """Hang up now: SIGHUP, SIGKILL after a grace."""
        await self.process.signal(signal.SIGHUP)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ended.wait(), HANGUP_GRACE)
            return
        await self.process.signal(signal.SIGKILL)
        await self.process.close()

    def _remember(self, chunk: bytes) -> None:
        self._recent += chunk
        if len(self._recent) > REPLAY:
            del self._recent[: len(self._recent) - REPLAY]
            self._wrapped = True

    def _replay(self) -> bytes:
        data = bytes(self._recent)
        if self._wrapped:  # begin at a line, not inside a character or an escape sequence
            newline = data.find(b"\n", 0, 4096)
            data = data[newline + 1:] if newline >= 0 else data
        return data

    async def _let_go(self, keep: float) -> None:
        await asyncio.sleep(keep)
        await self.end()


class Terminals:
    """The terminals of this node's sessions, by id."""

    def __init__(self, runtime: DockerRuntime) -> None:
        self.runtime = runtime
        self._terminals: dict[str, Terminal] = {}
        self._pumps: set[asyncio.Task[None]] = set()

    async def open(
        self, session_id: str, terminal_id: str | None, rows: int, cols: int
    ) -> tuple[Terminal, bool]:
        """The session's terminal ``terminal_id`` if it is still there (``True``: resumed),
        else a new shell of ``rows`` × ``cols``."""
        found = self._terminals.get(terminal_id or "")
        if found is not None and found.session_id == session_id and not found.ended.is_set():
            await found.resize(rows, cols)
            return found, True
        mine = [t for t in self._terminals.values() if t.session_id == session_id]
        if len(mine) >= MAX_PER_SESSION:
            raise TerminalError(f"this session has {len(mine)} terminals open, the most "
                                "allowed; exit one (or wait for a dropped one to end)")
        process = await self.runtime.open_exec(
            session_id, SHELL, tty=True, env=ENV, size=(rows, cols)
        )
        terminal = Terminal(secrets.token_urlsafe(18), session_id, process)
        self._terminals[terminal.id] = terminal
        task = asyncio.create_task(self._run(terminal))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        return terminal, False

    async def _run(self, terminal: Terminal) -> None:
        try:
            await terminal.pump()
        except Exception:
            log.exception("terminal %s of session %s failed", terminal.id, terminal.session_id)
        finally:
            self._terminals.pop(terminal.id, None)

    def forget(self, keep: set[str]) -> None:
        """End the terminals of sessions not in ``keep`` (their containers are gone)."""
        for terminal in list(self._terminals.values()):
            if terminal.session_id not in keep:
                self._terminals.pop(terminal.id, None)
                task = asyncio.create_task(terminal.process.close())
                self._pumps.add(task)
                task.add_done_callback(self._pumps.discard)

    async def close(self) -> None:
        """The agent stops: hang up every shell."""
        await asyncio.gather(*(t.end() for t in list(self._terminals.values())),
                             return_exceptions=True)
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
