"""Session files on the node are pruned once their container is gone, never before it exists."""

from __future__ import annotations

import os
import time

import pytest

from gpuslice.agent.runtime import DockerRuntime

pytestmark = pytest.mark.docker


def _session_dir(runtime: DockerRuntime, session_id: str, age_s: float) -> None:
    path = runtime.files_root / "sessions" / session_id
    path.mkdir(parents=True)
    (path / "allocation.json").write_text("{}")
    then = time.time() - age_s
    os.utime(path, (then, then))


async def test_prune_keeps_young_and_in_flight_sessions(runtime: DockerRuntime) -> None:
    _session_dir(runtime, "gone", age_s=3600)
    _session_dir(runtime, "starting", age_s=3600)
    _session_dir(runtime, "just-written", age_s=1)
    assert await runtime.prune_files(keep={"starting"}) == ["gone"]
    left = sorted(p.name for p in (runtime.files_root / "sessions").iterdir())
    assert left == ["just-written", "starting"]
