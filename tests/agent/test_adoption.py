"""What the agent does with containers it did not make (pure): another agent's are never
removed, and adopted ones whose mounts are not this node's are made again."""

from __future__ import annotations

from pathlib import Path

from gpuslice.agent.adoption import misplaced
from gpuslice.agent.decide import Act, decide
from gpuslice.agent.runtime.models import ContainerState
from gpuslice.common.schemas.agents import Assignment

ROOT, STORAGE = Path("/data/new/agent"), Path("/data/new/storage")


def container(owned: bool = True, **mounts: str) -> ContainerState:
    return ContainerState(
        session_id="s1", container_id="c1", name="gpuslice-s1", status="running",
        exit_code=None, oom_killed=False, error="", started_at="", finished_at="",
        owner="alice", session_type="interactive", node="n", owned=owned,
        mounts={k.replace("_", "/"): v for k, v in mounts.items()},
    )


def running(session_id: str = "s1") -> Assignment:
    return Assignment.model_validate({
        "session_id": session_id, "name": "s", "owner": "alice", "image": "img",
        "type": "interactive", "status": "RUNNING", "desired": "running", "command": None,
        "env": {}, "slices": [],
        "resources": {"gpu": 0, "cpu": 500, "mem": 2**28},
    })


def test_a_container_of_another_agent_or_of_none_is_never_removed() -> None:
    assert decide(None, container(owned=False), "s1") is None
    removal = decide(None, container(owned=True), "s1")
    assert removal is not None and removal.act is Act.REMOVE  # its own orphan: removed
    # another agent's, for a session this node's manager gives it: adopted
    assert decide(running(), container(owned=False), "s1") is None


def test_mounts_of_another_data_directory_are_misplaced() -> None:
    ours = container(_run_gpuslice=f"{ROOT}/sessions/s1/run/gpuslice",
                     _opt_gpuslice_bin=f"{ROOT}/shared/abc/opt/gpuslice/bin",
                     _home_work_data=f"{STORAGE}/alice/data")
    assert misplaced(ours, ROOT, STORAGE) is None
    assert misplaced(container(), ROOT, None) is None  # none listed: nothing to say
    old = container(_run_gpuslice="/data/old/agent/sessions/s1/run/gpuslice")
    why = misplaced(old, ROOT, STORAGE)
    assert why is not None and "/data/old/agent/sessions/s1/run/gpuslice" in why
    folder = container(_home_work_data="/data/old/storage/alice/data")
    why = misplaced(folder, ROOT, STORAGE)
    assert why is not None and "outside this node's storage root" in why
    action = decide(running(), old, "s1", misplaced(old, ROOT, STORAGE))
    assert action is not None and action.act is Act.RECREATE
    assert action.reason.startswith("restarted: its container was made by another agent")
