"""Time limits (`--time`) and scheduled starts (`--begin`) through the API, with a fake agent."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from gpuslice.manager.scheduler import Policy
from gpuslice.manager.settings import ManagerSettings
from tests.manager.conftest import AgentFactory, Client, create
from tests.manager.fake_agent import gpu
from tests.manager.helpers import wait_status, wait_until


@pytest.fixture
def settings(settings: ManagerSettings) -> ManagerSettings:
    settings.sessions.time_limit_interval = 0.2
    settings.sessions.max_time_limit = 86400
    settings.sessions.time_limit_warning = 1
    settings.scheduler.policy = Policy.BACKFILL
    return settings


async def test_a_session_is_warned_then_ended_at_its_time_limit_with_that_reason(
    make_agent: AgentFactory, admin: Client
) -> None:
    agent = await make_agent("node-1")
    [s] = await create(admin, resources={"gpu": 0.5}, time_limit=2)
    assert s["time_limit"] == 2 and s["env"]["GPUSLICE_TIME_LIMIT"] == "2"
    running = await wait_until(admin, [s["id"]], lambda x: x[0]["ends_at"] is not None
                               or x[0]["status"] in {"TERMINATING", "TERMINATED", "ERROR"})
    assert running[0]["status"] == "RUNNING", running
    ends = datetime.fromisoformat(running[0]["ends_at"])
    started = next(h["at"] for h in (await admin.get(f"/api/v1/sessions/{s['id']}")).json()
                   ["history"] if h["status"] == "RUNNING")
    assert ends == datetime.fromisoformat(started) + timedelta(seconds=2)
    done = await wait_status(admin, s["id"], {"TERMINATED", "ERROR"})
    assert done["status"] == "TERMINATED", done
    assert done["status_reason"] == "time limit reached (2s)"
    assert agent.signals == [(s["id"], "SIGUSR1")]
    history = (await admin.get(f"/api/v1/sessions/{s['id']}")).json()["history"]
    warned = [h["reason"] for h in history if h["reason"].startswith("SIGUSR1 sent")]
    assert warned == ["SIGUSR1 sent: its time limit ends in 1 s"], history  # (rounded up)


@pytest.mark.parametrize("given, seconds", [("30m", 1800), ("2h", 7200), ("1:30:00", 5400),
                                            ("90", 5400), ("1d", 86400)])
async def test_time_limits_as_slurm_users_write_them(
    admin: Client, given: str, seconds: int
) -> None:
    [s] = await create(admin, time_limit=given)
    assert s["time_limit"] == seconds


async def test_a_bad_or_too_long_time_limit_is_refused_with_what_is_allowed(
    admin: Client,
) -> None:
    bad = await create(admin, expect=422, time_limit="soon")
    assert bad["field"] == "time_limit"
    assert "'soon' is not a time limit; use e.g. 30m, 2h, 1d" in bad["message"]
    long = await admin.post("/api/v1/sessions", json={"image": "python:3.11",
                                                      "time_limit": "2d"})
    assert long.status_code == 422, long.text
    assert long.json()["code"] == "time_limit_too_long"
    assert long.json()["message"] == (
        "time_limit: 2d is longer than allowed; at most 1d (sessions.max_time_limit)")


async def test_a_scheduled_start_waits_pending_with_its_time(
    make_agent: AgentFactory, admin: Client
) -> None:
    await make_agent("node-1")
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    [s] = await create(admin, resources={"gpu": 0.5}, begin_at=later.isoformat())
    [now] = await create(admin, resources={"gpu": 0.5},
                         begin_at=(datetime.now(UTC) - timedelta(minutes=1)).isoformat())
    await wait_status(admin, now["id"], {"RUNNING"})
    [waiting] = await wait_until(admin, [s["id"]], lambda x: x[0]["wait_code"] == "begin")
    assert waiting["status"] == "PENDING" and waiting["queue_position"] is None
    day = "" if later.date() == datetime.now(UTC).date() else f"{later:%Y-%m-%d} "
    assert waiting["status_reason"] == f"starts at {day}{later:%H:%M} UTC, as asked"
    assert datetime.fromisoformat(waiting["begin_at"]) == later


async def test_a_scheduled_start_needs_a_time_zone(admin: Client) -> None:
    bad = await create(admin, expect=422, begin_at="2030-01-01T22:00:00")
    assert bad["field"] == "begin_at" and "time zone" in bad["message"]


async def test_backfill_starts_only_a_job_that_ends_before_the_held_gpu_is_free(
    make_agent: AgentFactory, admin: Client
) -> None:
    """One GPU, half of it busy for an hour: a whole-GPU session waits with the GPU held for
    it; a short job starts beside it on that GPU, a job without a limit does not."""
    await make_agent("node-1", devices=[gpu(0)], fgpu_per_gpu=1)
    [busy] = await create(admin, resources={"gpu": 0.5}, time_limit="1h", name="busy")
    await wait_status(admin, busy["id"], {"RUNNING"})
    [big] = await create(admin, resources={"gpu": 1}, name="big")
    [short] = await create(admin, resources={"gpu": 0.25}, time_limit="10m", name="short")
    [open_] = await create(admin, resources={"gpu": 0.25}, name="open")
    await wait_status(admin, short["id"], {"RUNNING"})
    big_now, open_now = await wait_until(admin, [big["id"], open_["id"]], lambda x: all(
        "held" in s["status_reason"] for s in x))
    assert big_now["status"] == open_now["status"] == "PENDING"
    # within the hour "busy" has left (from its RUNNING, or from now before the sweep saw it)
    assert re.search(r"capacity on node-1 GPU 0 is held for it, expected to be free in "
                     r"(59m\d\ds|1h00m)$", big_now["status_reason"]), big_now
    assert "held for sessions ahead of it" in open_now["status_reason"], open_now
    preview = await admin.post("/api/v1/sessions/preview", json={
        "image": "python:3.11", "time_limit": "2d"})
    assert preview.status_code == 422 and preview.json()["code"] == "time_limit_too_long"
