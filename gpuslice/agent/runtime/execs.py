"""Long-lived processes in a session's container: terminals (a TTY) and apps (their output).

A mixin of :class:`DockerRuntime`, like ``image_ops``. Both are Engine API execs run as the
session's user; :class:`ExecProcess` is one of them, attached: its output as it comes, its input
(terminals), its size, its exit code, and a signal by the process id dockerd reports (a host
pid: the agent runs on the node). Nothing is kept here: the terminal and app supervisors in
``agent/streams`` own what they started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiodocker
from aiodocker.execs import Exec
from aiodocker.stream import Stream


class ExecProcess:
    """One attached exec: read its output, write its input, resize its TTY, end it."""

    def __init__(self, execution: Exec, stream: Stream, tty: bool) -> None:
        self._exec = execution
        self._stream = stream
        self.tty = tty
        self.pid = 0  # the host's pid of the process, once started

    @property
    def id(self) -> str:
        return self._exec.id

    async def read(self) -> bytes | None:
        """The next output (stdout and stderr alike), ``None`` once it ended."""
        message = await self._stream.read_out()
        return None if message is None else message.data

    async def read_frame(self) -> tuple[int, bytes] | None:
        """The next output and where it came from (1: stdout, 2: stderr; a TTY's is all 1),
        ``None`` once it ended: for a protocol spoken on stdout (``sshd -i``)."""
        message = await self._stream.read_out()
        return None if message is None else (message.stream, message.data)

    async def write(self, data: bytes) -> None:
        await self._stream.write_in(data)

    async def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(aiodocker.DockerError):  # it ended meanwhile
            await self._exec.resize(h=rows, w=cols)

    async def exit_code(self) -> int | None:
        """Its exit code once it ended, ``None`` while it runs."""
        info = await self._exec.inspect()
        return None if info.get("Running") else int(info.get("ExitCode") or 0)

    async def signal(self, sig: int = signal.SIGHUP) -> bool:
        """Send ``sig`` while it runs (a terminal's shell passes SIGHUP on to its jobs)."""
        try:
            info = await self._exec.inspect()
        except aiodocker.DockerError:
            return False
        if not info.get("Running") or not self.pid:
            return False
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def close(self) -> None:
        """Hang up (a shell reading its terminal sees the end of its input)."""
        await self._stream.close()


class ExecOps:
    _call: Callable[[Callable[[aiodocker.Docker], Awaitable[Any]]], Awaitable[Any]]
    _container: Callable[[str], Awaitable[aiodocker.containers.DockerContainer]]

    async def open_exec(
        self,
        session_id: str,
        argv: Sequence[str],
        *,
        tty: bool,
        env: Mapping[str, str] | None = None,
        size: tuple[int, int] | None = None,
        stdin: bool | None = None,
    ) -> ExecProcess:
        """Start ``argv`` in the session's container as its user, attached (stdin too with a
        TTY of ``size`` rows × columns, or when ``stdin``); :class:`SessionNotFound` without a
        container."""
        container = await self._container(session_id)
        execution = await self._call(lambda d: container.exec(
            list(argv), stdout=True, stderr=True, stdin=tty if stdin is None else stdin,
            tty=tty, environment=dict(env or {}),
        ))
        stream = execution.start(detach=False, timeout=None)
        await stream.__aenter__()  # the Engine starts the process when the stream opens
        process = ExecProcess(execution, stream, tty)
        for _ in range(40):  # the Engine reports the pid a moment after the start
            info = await self._call(lambda d: execution.inspect())
            process.pid = int(info.get("Pid") or 0)
            if process.pid or not info.get("Running", True):
                break
            await asyncio.sleep(0.025)
        if tty and size is not None:
            await process.resize(*size)
        return process

    async def container_env(self, session_id: str) -> list[str]:
        """The session container's own ``Env`` (``KEY=value``): what every exec in it starts
        with (the slice's ``GPUSLICE_*`` and device variables, the hook's ``PYTHONPATH``)."""
        container = await self._container(session_id)
        info = await self._call(lambda d: container.show())
        return list((info.get("Config") or {}).get("Env") or [])
