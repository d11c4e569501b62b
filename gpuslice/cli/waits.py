"""How a command that waits on sessions ends: exit code 0 only for the outcome it promised.

The codes (each waiting command's --help lists those it uses): 0 what it promised; 1 a
session ended otherwise (ERROR or CANCELLED, or a batch that FAILED where success was
promised); 2 bad input, as every command; 124 its ``--timeout`` passed first, as timeout(1)
answers (the sessions go on); 130 Ctrl-C. Each failure is one line on stderr that names the
session and says why (its status reason); output asked for (``--json``) is printed before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import typer

from gpuslice.cli.output import err_console, print_new
from gpuslice.client import schemas

if TYPE_CHECKING:
    from gpuslice.client import Client
    from gpuslice.common.schemas.sessions import (
        SessionPublic,
        SessionResult,
        SessionStatus,
    )

ENDED = 1
TIMEOUT = 124

CREATE_CODES = (
    "Exit codes: 0 created (with --wait: every session RUNNING, or PENDING with the "
    "scheduler's reason); 1 with --wait: a session ended ERROR or CANCELLED, or ended before "
    "it ran (a batch that FAILED, too); 2 bad input; 124 --timeout passed first (the sessions "
    "go on); 130 Ctrl-C. Each failure is a line on stderr naming the session and why; --json "
    "prints the sessions in every case."
)
LOGS_CODES = (
    "Exit codes with -f: 0 the session ended TERMINATED (whatever its result: see `show`); "
    "1 it ended ERROR or CANCELLED (stderr says why); 124 --timeout passed first; 130 Ctrl-C."
)


class Watched(Protocol):
    """What the lines below say of a session (or of a run, which is one)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> SessionStatus: ...
    @property
    def status_reason(self) -> str: ...
    @property
    def result(self) -> SessionResult | None: ...
    @property
    def exit_code(self) -> int | None: ...


@dataclass
class Outcome:
    """The failures of a wait (lines for stderr) and the exit code they make."""

    failures: list[str] = field(default_factory=list)
    code: int = 0

    def add(self, line: str, code: int) -> None:
        self.failures.append(line)
        # a session that ended is a definite failure: it outranks one that is still going
        self.code = ENDED if ENDED in (code, self.code) else code

    def exit(self) -> None:
        """Say every failure on stderr and exit with the code (nothing when all went well)."""
        for line in self.failures:
            err_console.print(f"error: {line}", markup=False)
        if self.code:
            raise typer.Exit(self.code)


class Pace:
    """Looks again ``first`` seconds apart at first, further apart up to ``most`` seconds,
    until ``timeout`` seconds have passed (None: no limit)."""

    def __init__(self, timeout: float | None, first: float = 0.2, most: float = 1.0) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.delay = min(first, most)
        self.most = most

    def wait(self) -> bool:
        """Sleep until the next look; False, at once, when the time is up."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return False
        left = float("inf") if self.deadline is None else self.deadline - now
        time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 1.5, self.most)
        return True


def ended(session: Watched) -> str:
    """``session x (1a2b3c4d5e6f) ended ERROR: why``."""
    how = session.status.value
    if session.result is not None and session.result.value == "FAILED":
        how = f"FAILED (exit code {session.exit_code})"
    return f"session {session.name} ({session.id[:12]}) ended {how}: {session.status_reason}"


def still(session: Watched, timeout: float) -> str:
    """``session x (1a2b3c4d5e6f) is still PREPARING after 5s: why; it goes on``."""
    return (f"session {session.name} ({session.id[:12]}) is still {session.status.value} "
            f"after {timeout:g}s: {session.status_reason}; it goes on (stop it: gpuslice "
            f"session destroy {session.name})")


def started(client: Client, sessions: list[SessionPublic], timeout: float,
            ) -> tuple[list[SessionPublic], Outcome]:
    """Wait, ``timeout`` seconds at most, until each session runs, waits PENDING with the
    scheduler's reason, or ends; the sessions as last seen and what failed."""
    latest = {s.id: s for s in sessions}
    waiting = list(latest)
    pace = Pace(timeout)
    while waiting:
        for sid in waiting:
            latest[sid] = client.get_session(sid)
        waiting = [sid for sid in waiting if not _settled(latest[sid])]
        if waiting and not pace.wait():
            break
    outcome = Outcome()
    for session in latest.values():
        if session.status in schemas.sessions.FINAL and not _ran(session):
            outcome.add(ended(session), ENDED)
        elif not _settled(session):
            outcome.add(still(session, timeout), TIMEOUT)
    return list(latest.values()), outcome


def follow_logs(client: Client, session: SessionPublic, tail: int, follow: bool,
                timeout: float | None) -> Outcome:
    """Print the session's output; with ``follow``, what it prints next until it ends."""
    status = schemas.sessions.SessionStatus
    seen = print_new(client.session_logs(session.id, tail).logs, [])
    pace = Pace(timeout, first=1.0)  # a look at the logs asks the node: once a second
    while follow and session.status not in schemas.sessions.FINAL:
        if not pace.wait():
            return _failed(still(session, timeout or 0), TIMEOUT)
        session = client.get_session(session.id)
        if session.status not in (status.PENDING, status.SCHEDULED, status.PREPARING):
            seen = print_new(client.session_logs(session.id, tail).logs, seen)
    if follow and session.status in (status.ERROR, status.CANCELLED):
        return _failed(ended(session), ENDED)
    return Outcome()


def _failed(line: str, code: int) -> Outcome:
    outcome = Outcome()
    outcome.add(line, code)
    return outcome


def _settled(session: SessionPublic) -> bool:
    """Running, ended, or queued with the scheduler's reason: nothing more to wait for."""
    status = schemas.sessions.SessionStatus
    queued = session.status is status.PENDING and session.wait_code is not None
    return queued or session.status is status.RUNNING or session.status in (
        schemas.sessions.FINAL)


def _ran(session: SessionPublic) -> bool:
    """It ended after running (a batch that is done, a session stopped once it ran)."""
    status = schemas.sessions.SessionStatus
    failed = session.result is not None and session.result.value == "FAILED"
    return session.status is status.TERMINATED and not failed and any(
        change.status is status.RUNNING for change in session.history or [])
