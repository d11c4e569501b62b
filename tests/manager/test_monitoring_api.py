"""Monitoring through the API with an in-process agent: two sessions on one GPU (one busy, one
idle) each with its own numbers, the idle one reclaimed and the busy one kept, a session whose
GPU numbers are missing kept; stats, usage, top and /metrics, each for who may see them."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from gpuslice.manager.backup import backup
from gpuslice.manager.backup.keys import load_or_create
from gpuslice.manager.backup.record import record
from gpuslice.manager.db.base import utcnow
from gpuslice.manager.db.models import NodeRow
from gpuslice.manager.services.nodes.liveness import sweep_lost
from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.manager.conftest import IMAGE, AgentFactory, Client, UserFactory, client_for, create
from tests.manager.fake_agent import FakeAgent
from tests.waits import scaled

GiB = 1024**3
ALERT_RULES = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "alerts.yml"
IDLE = {"window": 2, "gpu_util": 1}


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": migrated_database_url},
        scheduler={"interval": 1.0},
        nodes={"node_timeout": 30, "sweep_interval": 0.2, "assignment_poll": 0.2},
        sessions={"allowed_images": [IMAGE], "log_timeout": 3},
        monitoring={"reclaim_interval": 0.2, "scrape_token": "scrape-secret-1"},
    )


class Measured:
    """Plays the agent's measurements: one sample per session every heartbeat."""

    def __init__(self, agent: FakeAgent) -> None:
        self.agent = agent
        self.clock_ms = 1_000_000
        self.gpu: dict[str, tuple[int | None, int | None] | None] = {}  # sid -> (mem, util)

    async def beat(self, interval_ms: int = 300) -> None:
        self.clock_ms += interval_ms
        self.agent.usage = {
            sid: {"cpu": 250, "mem": GiB, "at_ms": self.clock_ms, "interval_ms": interval_ms,
                  "gpus": None if figures is None else [
                      {"uuid": "GPU-mock-0", "mem_used": figures[0], "utilization": figures[1]}]}
            for sid, figures in self.gpu.items() if sid in self.agent.running
        }
        await self.agent.heartbeat()


async def wait_status(client: Client, sid: str, status: str, measured: Measured | None = None,
                      timeout: float = 30) -> dict[str, Any]:
    async with asyncio.timeout(scaled(timeout)):
        while True:
            session = (await client.get(f"/api/v1/sessions/{sid}")).json()
            if session["status"] == status:
                return session
            if measured is not None:
                await measured.beat()
            await asyncio.sleep(0.3)


async def test_the_idle_session_on_a_shared_gpu_is_reclaimed_the_busy_one_kept(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice = await make_user("alice", policy={"idle": IDLE})
    agent = await make_agent("gpu-node")
    busy, idle, unknown = [
        (await create(alice, name=n, resources={"gpu": 0.25, "cpu": 1, "mem": "1g"}))[0]
        for n in ("busy", "idle", "unknown")
    ]
    measured = Measured(agent)
    measured.gpu = {busy["id"]: (6 * GiB, 80), idle["id"]: (0, 0), unknown["id"]: None}
    for s in (busy, idle, unknown):
        await wait_status(alice, s["id"], "RUNNING", measured)
    await measured.beat()
    shown = (await alice.get(f"/api/v1/sessions/{idle['id']}")).json()
    assert shown["reclaim"]["kind"] == "idle"  # the countdown, before it happens
    assert shown["reclaim"]["reason"] == "idle for 2 s: GPU util < 1 %"
    assert (await alice.get(f"/api/v1/sessions/{busy['id']}")).json()["reclaim"] is None

    ended = await wait_status(alice, idle["id"], "TERMINATED", measured)
    assert ended["status_reason"] == "idle for 2 s: GPU util < 1 %"
    assert [h["reason"] for h in ended["history"]][-2:] == ["idle for 2 s: GPU util < 1 %"] * 2
    for _ in range(10):  # well past the window: the busy and the unmeasured ones stay
        await measured.beat()
        await asyncio.sleep(0.2)
    for s in (busy, unknown):
        assert (await alice.get(f"/api/v1/sessions/{s['id']}")).json()["status"] == "RUNNING"

    mine = (await alice.get(f"/api/v1/sessions/{busy['id']}/stats")).json()
    gone = (await alice.get(f"/api/v1/sessions/{idle['id']}/stats")).json()
    assert mine["now"]["gpus"] == [{"uuid": "GPU-mock-0", "mem_used": 6 * GiB,
                                    "utilization": 80}]
    assert gone["status"] == "TERMINATED" and gone["now"]["gpus"][0]["utilization"] == 0
    assert mine["points"][-1]["gpu_util"] == 80 and mine["points"][-1]["fgpu"] == 0.25
    assert mine["totals"]["fgpu_hours"] > 0 and mine["totals"]["gpu_util"] == 80
    nothing = (await alice.get(f"/api/v1/sessions/{unknown['id']}/stats")).json()
    assert nothing["now"]["gpus"] is None and nothing["points"][-1]["gpu_util"] is None


async def test_stats_are_the_owners_and_check_their_query(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent()
    [s] = await create(alice, resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    measured = Measured(agent)
    measured.gpu = {s["id"]: (GiB, 30)}
    await wait_status(alice, s["id"], "RUNNING", measured)
    await measured.beat()
    assert (await bob.get(f"/api/v1/sessions/{s['id']}/stats")).status_code == 404
    assert (await admin.get(f"/api/v1/sessions/{s['id']}/stats")).status_code == 200
    r = await alice.get(f"/api/v1/sessions/{s['id']}/stats", params={"since": "yesterday"})
    assert r.status_code == 422 and "neither a duration" in r.json()["message"]
    r = await alice.get(f"/api/v1/sessions/{s['id']}/stats", params={"step": 90})
    assert r.status_code == 422 and "multiple of 60" in r.json()["message"]
    r = await alice.get(f"/api/v1/sessions/{s['id']}/stats", params={"since": "7d", "step": 60})
    assert r.status_code == 422 and "at most 5000" in r.json()["message"]
    ok = await alice.get(f"/api/v1/sessions/{s['id']}/stats", params={"since": "2h"})
    assert ok.status_code == 200 and ok.json()["step"] == 120  # about 120 points by default

    # The in-session endpoint's relay: only the node the session is on may ask.
    other = await make_agent("node-2")
    assert (await other.client.get(f"/api/v1/agents/me/sessions/{s['id']}/usage")).status_code \
        == 404
    relayed = await agent.client.get(f"/api/v1/agents/me/sessions/{s['id']}/usage")
    assert relayed.status_code == 200 and relayed.json()["session_id"] == s["id"]


async def test_usage_per_user_and_day(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent()
    [a] = await create(alice, resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    [b] = await create(bob, resources={"gpu": 0.25, "cpu": 1, "mem": "1g"})
    for s in (a, b):
        await wait_status(alice if s is a else bob, s["id"], "RUNNING")
    measured = Measured(agent)  # exactly three samples of 10 s each, from here
    measured.gpu = {a["id"]: (GiB, 30), b["id"]: (GiB, 30)}
    for _ in range(3):
        await measured.beat(10_000)
    everyone = (await admin.get("/api/v1/usage")).json()["rows"]
    assert sorted(r["user"] for r in everyone) == ["alice", "bob"]
    [own] = (await alice.get("/api/v1/usage", params={"since": "1d"})).json()["rows"]
    assert own["user"] == "alice" and own["sessions"] == 1
    assert own["totals"]["fgpu_hours"] == pytest.approx(0.5 * 30 / 3600, abs=1e-6)
    assert own["totals"]["cpu_hours"] == pytest.approx(0.25 * 30 / 3600, abs=1e-6)
    [only_bob] = (await admin.get("/api/v1/usage", params={"user": "bob"})).json()["rows"]
    assert only_bob["user"] == "bob"
    assert (await alice.get("/api/v1/usage", params={"user": "bob"})).status_code == 403
    r = await admin.get("/api/v1/usage", params={"user": "nobody"})
    assert r.status_code == 422 and r.json()["code"] == "unknown_user"
    r = await admin.get("/api/v1/usage", params={"since": "last week"})
    assert r.status_code == 422 and r.json()["field"] == "since"


async def test_top_shows_slices_and_hides_other_users(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent(devices=[{"index": 0, "uuid": "GPU-mock-0", "model": "Mock A100",
                                       "mem": 40 * GiB, "sms": 108, "mem_used": 7 * GiB,
                                       "utilization": 64}])
    [a] = await create(alice, resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    [b] = await create(bob, resources={"gpu": 0.25, "cpu": 1, "mem": "1g"})
    measured = Measured(agent)
    measured.gpu = {a["id"]: (6 * GiB, 60), b["id"]: (GiB, 4)}
    for s in (a, b):
        await wait_status(admin, s["id"], "RUNNING", measured)
    await measured.beat()
    [node] = (await admin.get("/api/v1/top")).json()["nodes"]
    [device] = node["devices"]
    assert (device["mem_used"], device["utilization"], device["used"]) == (7 * GiB, 64, 0.75)
    assert {(s["user"], s["fgpu"], s["gpu_util"]) for s in device["slices"]} == {
        ("alice", 0.5, 60), ("bob", 0.25, 4)}
    [node] = (await alice.get("/api/v1/top")).json()["nodes"]
    [device] = node["devices"]
    assert [s["user"] for s in device["slices"]] == ["alice"]
    assert (device["mem_used"], device["utilization"], device["used"]) == (None, None, None)


async def test_metrics_need_a_token_and_show_each_session(
    app: FastAPI, admin: Client, anon: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    alice = await make_user("alice")
    agent = await make_agent(devices=[{"index": 0, "uuid": "GPU-mock-0", "model": "Mock A100",
                                       "mem": 40 * GiB, "sms": 108, "mem_used": 3 * GiB,
                                       "utilization": 41}])
    [s] = await create(alice, name="train", resources={"gpu": 0.5, "cpu": 1, "mem": "1g"})
    [u] = await create(alice, name="blind", resources={"gpu": 0.25, "cpu": 1, "mem": "1g"})
    await create(alice, name="waits", resources={"gpu": 1, "cpu": 1, "mem": "1g"})
    measured = Measured(agent)
    measured.gpu = {s["id"]: (2 * GiB, 37), u["id"]: None}
    await wait_status(alice, s["id"], "RUNNING", measured)
    await wait_status(alice, u["id"], "RUNNING", measured)
    await measured.beat()

    assert (await anon.get("/metrics")).status_code == 401
    assert (await alice.get("/metrics")).status_code == 403
    async with client_for(app, "wrong") as wrong:
        assert (await wrong.get("/metrics")).status_code == 401
    async with client_for(app, "scrape-secret-1") as scraper:
        text = (await scraper.get("/metrics")).text
    assert (await admin.get("/metrics")).status_code == 200
    found = scraped(text)
    mine = {"session": s["id"], "session_name": "train", "user": "alice", "node": "node-1",
            "gpu": "GPU-mock-0"}
    assert found["gpuslice_session_gpu_memory_bytes"][mine] == 2 * GiB
    assert found["gpuslice_session_gpu_utilization"][mine] == 37
    assert found["gpuslice_session_fgpu"][mine] == 0.5
    assert found["gpuslice_session_gpu_memory_limit_bytes"][mine] == 20 * GiB
    blind = {**mine, "session": u["id"], "session_name": "blind"}
    assert found["gpuslice_session_fgpu"][blind] == 0.25
    assert blind not in found["gpuslice_session_gpu_utilization"]  # unknown: no sample at all
    device = {"gpu": "0", "UUID": "GPU-mock-0", "device": "nvidia0", "modelName": "Mock A100",
              "Hostname": "node-1", "node": "node-1"}
    assert found["DCGM_FI_DEV_GPU_UTIL"][device] == 41
    assert found["DCGM_FI_DEV_FB_USED"][device] == 3 * 1024  # MiB, as DCGM counts
    assert found["gpuslice_sessions"][{"status": "RUNNING"}] == 2
    assert found["gpuslice_queue_length"][{"reason": "capacity"}] == 1
    assert found["gpuslice_pool_allocation_ratio"][{"pool": "default", "resource": "gpu"}] == 0.75
    assert {"node": "node-1", "pool": "default"} in found["gpuslice_node_heartbeat_age_seconds"]
    assert found["gpuslice_scheduling_pass_seconds_count"][{}] >= 1
    # what the shipped alert rules read is exported (the backup's only after a first backup)
    rules = set(re.findall(r"\bgpuslice_[a-z_]+", ALERT_RULES.read_text()))
    rules.discard("gpuslice_backup_last_success_timestamp_seconds")
    assert rules - set(found) == set()


async def test_metrics_tell_a_lost_node_from_a_revoked_one(
    app: FastAPI, admin: Client, make_agent: AgentFactory
) -> None:
    for name in ("lost-1", "revoked-1", "alive-1"):
        await make_agent(name)
    async with app.state.sessionmaker() as db:  # its heartbeats stopped a minute ago
        await db.execute(update(NodeRow).where(NodeRow.name == "lost-1")
                         .values(last_heartbeat_at=utcnow() - timedelta(minutes=1)))
        await db.commit()
    assert await sweep_lost(app.state.sessionmaker, timeout=30) == 1
    ids = {n["name"]: n["id"] for n in (await admin.get("/api/v1/nodes")).json()}
    assert (await admin.post(f"/api/v1/nodes/{ids['revoked-1']}/revoke")).status_code == 200
    found = scraped((await admin.get("/metrics")).text)
    for node, now in (("lost-1", "LOST"), ("revoked-1", "REVOKED"), ("alive-1", "ALIVE")):
        for status in ("ALIVE", "LOST", "REVOKED"):
            labels = {"node": node, "pool": "default", "status": status}
            assert found["gpuslice_node_status"][labels] == (status == now), (node, status)
        assert found["gpuslice_node_up"][{"node": node, "pool": "default"}] == (now == "ALIVE")


class Series(dict[frozenset[tuple[str, str]], float]):
    """One metric's samples, looked up by their labels as a dict."""

    def __getitem__(self, labels: object) -> float:
        return super().__getitem__(frozenset(labels.items()))  # type: ignore[attr-defined]

    def __contains__(self, labels: object) -> bool:
        return super().__contains__(frozenset(labels.items()))  # type: ignore[attr-defined]


def scraped(text: str) -> dict[str, Series]:
    """Prometheus' text format, parsed by prometheus-client: {sample name: Series}."""
    found: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, Series())[frozenset(sample.labels.items())] = \
                sample.value
    return found


async def test_policies_carry_idle_rules_and_lifetimes(admin: Client) -> None:
    body = {"name": "lab", "idle": {"window": 1800, "gpu_util": 1, "activity": True},
            "max_lifetime": 86400}
    r = await admin.post("/api/v1/policies", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["idle"] == {"window": 1800, "grace": 0, "gpu_util": 1, "cpu_util": None,
                                "activity": True, "combine": "all"}
    assert r.json()["max_lifetime"] == 86400
    bad = await admin.post("/api/v1/policies", json={"name": "x", "idle": {"window": 60}})
    assert bad.status_code == 422 and "at least one criterion" in bad.json()["message"]
    bad = await admin.post("/api/v1/policies", json={"name": "y", "idle": {
        "window": 60, "gpu_util": 1, "combine": "maybe"}})
    assert bad.status_code == 422 and bad.json()["field"] == "idle.combine"


async def test_metrics_say_when_the_last_backup_succeeded_and_nothing_before(
    app: FastAPI, admin: Client, settings: ManagerSettings, tmp_path: Path
) -> None:
    metric = "gpuslice_backup_last_success_timestamp_seconds"
    assert metric not in scraped((await admin.get("/metrics")).text)  # unknown, not 0
    key = load_or_create(tmp_path / "backup-key")[0]
    taken = await backup(settings.database_url, tmp_path / "b.gsbackup", key)
    assert await record(settings.database_url, taken.header, 1, True) is None
    [(labels, when)] = scraped((await admin.get("/metrics")).text)[metric].items()
    assert labels == frozenset()
    assert abs(when - taken.header.created_at.timestamp()) < scaled(60)


async def test_usage_by_project_and_day(
    admin: Client, make_user: UserFactory, make_agent: AgentFactory
) -> None:
    """Issue 32: the same accounting per project; a user sees only their own sessions' share,
    and never the name of a project they are not in."""
    alice, bob = await make_user("alice"), await make_user("bob")
    agent = await make_agent()
    r = await admin.post("/api/v1/projects", json={"name": "vision"})
    assert r.status_code == 201, r.text
    for name in ("alice", "bob"):
        await admin.post("/api/v1/projects/vision/members", json={"username": name})
    [a] = await create(alice, resources={"gpu": 0.5, "cpu": 1, "mem": "1g"}, project="vision")
    [b] = await create(bob, resources={"gpu": 0.25, "cpu": 1, "mem": "1g"}, project="vision")
    [c] = await create(bob, resources={"gpu": 0.25, "cpu": 1, "mem": "1g"})
    for client, s in ((alice, a), (bob, b), (bob, c)):
        await wait_status(client, s["id"], "RUNNING")
    measured = Measured(agent)
    measured.gpu = {s["id"]: (GiB, 30) for s in (a, b, c)}
    for _ in range(3):
        await measured.beat(10_000)
    rows = (await admin.get("/api/v1/usage", params={"by": "project"})).json()["rows"]
    by_project = {r["project"]: r for r in rows}
    assert sorted(by_project) == ["vision", "~bob"]
    assert by_project["vision"]["sessions"] == 2
    assert by_project["vision"]["totals"]["fgpu_hours"] == pytest.approx(0.75 * 30 / 3600,
                                                                         abs=1e-6)
    [own] = (await alice.get("/api/v1/usage", params={"by": "project"})).json()["rows"]
    assert own["project"] == "vision" and own["sessions"] == 1
    r = await admin.get("/api/v1/usage", params={"by": "team"})
    assert r.status_code == 422 and r.json()["field"] == "by"
