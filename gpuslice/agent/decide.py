"""What the agent does about one session: a pure decision from desired and actual state.

Desired state is the manager's assignment (status and `desired`); actual state is the session's
container as Docker reports it (``None``: there is none). The agent never restarts a container
that stopped without being asked: the session ends, with the reason, and the user decides.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum

from gpuslice.agent.runtime.models import ContainerState
from gpuslice.common.schemas.agents import Assignment
from gpuslice.common.schemas.sessions import SessionStatus, SessionType


class Act(StrEnum):
    START = "start"  # create (if needed) and start the container; PREPARING then RUNNING
    REPORT = "report"  # only tell the manager the session's actual state
    FINISH = "finish"  # the container stopped by itself: report how, then remove it
    STOP = "stop"  # the manager wants it stopped: stop, remove, report TERMINATED
    REMOVE = "remove"  # a container of a session the manager no longer lists
    # an adopted container whose mounts are not this node's (another data directory's): made
    # again, so its in-session endpoint, tools and folders work (a restart, said in history)
    RECREATE = "recreate"


@dataclass(frozen=True, slots=True)
class Action:
    act: Act
    session_id: str
    status: SessionStatus | None = None  # what to report
    exit_code: int | None = None
    reason: str = ""
    container_id: str | None = None  # the session's container as seen (no need to look again)


def decide(
    assignment: Assignment | None, container: ContainerState | None, session_id: str,
    misplaced: str | None = None,
) -> Action | None:
    """The one next step for a session, or None when desired and actual agree. ``misplaced``:
    why the container's mounts are not this node's (``adoption.misplaced``), if they are not.

    A container of another agent id (``owned`` false: another platform's on the same Docker
    Engine, or made before agents had ids) is adopted for a session the manager gives this
    node, and otherwise never removed: it may be a live session of someone else's."""
    if assignment is None:
        if container is None or not container.owned:
            return None
        return Action(Act.REMOVE, session_id, container_id=container.container_id)
    if assignment.desired == "stopped":
        return Action(Act.STOP, session_id, SessionStatus.TERMINATED, reason="stopped",
                      container_id=container.container_id if container else None)
    status = assignment.status
    if container is None or container.status == "created":
        if status in (SessionStatus.SCHEDULED, SessionStatus.PREPARING):
            return Action(Act.START, session_id)
        return Action(
            Act.REPORT,
            session_id,
            SessionStatus.ERROR,
            reason="its container is gone from the node",
        )
    if container.running:
        if misplaced:
            return Action(Act.RECREATE, session_id, SessionStatus.RUNNING,
                          reason=f"restarted: {misplaced}",
                          container_id=container.container_id)
        if status is not SessionStatus.RUNNING:
            return Action(Act.REPORT, session_id, SessionStatus.RUNNING, reason="running")
        return None
    return _finished(assignment, container)


def _finished(assignment: Assignment, container: ContainerState) -> Action:
    code = container.exit_code
    sid, cid = assignment.session_id, container.container_id
    if container.oom_killed:
        return Action(
            Act.FINISH,
            sid,
            SessionStatus.ERROR,
            code,
            "killed: it used more than its memory limit (out of memory)",
            cid,
        )
    if assignment.type is SessionType.BATCH and code is not None:
        return Action(
            Act.FINISH, sid, SessionStatus.TERMINATED, code, f"exited with code {code}", cid
        )
    detail = f" with code {code}{_signal_note(code)}" if code is not None else ""
    error = f": {container.error}" if container.error else ""
    return Action(
        Act.FINISH,
        sid,
        SessionStatus.ERROR,
        code,
        f"its container stopped unexpectedly{detail}{error}",
        cid,
    )


def _signal_note(code: int) -> str:
    """Exit codes above 128 mean "killed by signal code - 128" (137: SIGKILL)."""
    if code <= 128:
        return ""
    try:
        return f" (killed by {signal.Signals(code - 128).name})"
    except ValueError:
        return ""
